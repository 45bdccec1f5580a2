-- Pays every request on a payment channel with a voucher signed before the run. Run with one
-- connection per thread (`-tN -cN`): each thread's connection is one channel, and wrk sends a
-- connection's requests one after another, so the channel's vouchers arrive in order.
-- Set by the benchmark above this text: FILES (the path of the voucher files, to which the
-- thread's number and `.txt` are appended; one PAYMENT-SIGNATURE value a line, in the order the
-- cumulative ceilings rise) and PATH (the paid route). A thread that runs out of vouchers sends
-- its request unpaid: the 402 shows up as a non-2xx answer and fails the run.
-- The next voucher is taken when an answer arrives, not when a request is written: wrk calls
-- `request` once more on the first thread's state, before any connection, to inspect it.
local vouchers = {}
local answered = 0
local next_tag = 0

-- Runs in wrk's main Lua state, once per thread: gives that thread's state a global `thread_tag`.
function setup(thread)
    next_tag = next_tag + 1
    thread:set("thread_tag", next_tag)
end

function init(args)
    for line in io.lines(FILES .. thread_tag .. ".txt") do
        vouchers[#vouchers + 1] = line
    end
end

function request()
    wrk.headers["Payment-Signature"] = vouchers[answered + 1]
    return wrk.format("GET", PATH)
end

function response(status, headers, body)
    answered = answered + 1
end
