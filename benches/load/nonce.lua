-- Gives every paid request its own nonce (EIP-3009 or Permit2) by rewriting 16 base64 characters
-- of the PAYMENT-SIGNATURE header in place. Those characters encode 12 digits of the nonce that
-- start on a 3-byte boundary of the JSON, so each 3 digits become 4 base64 characters.
-- Set by the benchmark above this text: TEMPLATE (the header), OFFSET (1-based index of the
-- first character), PATH (the paid route), RUN (a number no other run of this stub used),
-- DECIMAL (true for a Permit2 nonce, a decimal number; false for an EIP-3009 nonce, hex).
-- A nonce's 12 digits: 2 for the wrk thread, 3 for the run, 7 for the request.
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local prefix, suffix
local counter = 0
local next_tag = 0

-- Runs in wrk's main Lua state, once per thread: `thread:set` gives that thread's own state a
-- global `thread_tag`. It must stay a global there (a `local` of this chunk would shadow it and
-- every thread would send the same nonces).
function setup(thread)
    next_tag = next_tag + 1
    thread:set("thread_tag", next_tag)
end

function init(args)
    prefix = TEMPLATE:sub(1, OFFSET - 1)
    suffix = TEMPLATE:sub(OFFSET + 16)
end

local function encode3(text)
    local a, b, c = text:byte(1, 3)
    local n = a * 65536 + b * 256 + c
    local out = {}
    for shift = 3, 0, -1 do
        local index = math.floor(n / (64 ^ shift)) % 64
        out[#out + 1] = alphabet:sub(index + 1, index + 1)
    end
    return table.concat(out)
end

function request()
    counter = counter + 1
    local digits
    if DECIMAL then
        digits = string.format("%02d%03d%07d", thread_tag % 100, RUN % 1000, counter % 10000000)
    else
        digits = string.format("%02x%03x%07x", thread_tag, RUN, counter)
    end
    local encoded = encode3(digits:sub(1, 3)) .. encode3(digits:sub(4, 6))
        .. encode3(digits:sub(7, 9)) .. encode3(digits:sub(10, 12))
    wrk.headers["Payment-Signature"] = prefix .. encoded .. suffix
    return wrk.format("GET", PATH)
end
