-- Sign-in-with-x: who paid for which resource (the layer's canonical key, the offer's resource
-- URL) and when, so a buyer signs in again after a restart.
CREATE TABLE entitlements (
    resource  TEXT NOT NULL,
    address   TEXT NOT NULL,   -- EVM addresses lower-cased, anything else (base58) as is
    purchased INTEGER NOT NULL, -- unix seconds of the latest payment
    PRIMARY KEY (resource, address)
);

-- Sign-in nonces already used, each kept until its proof's expiry; a proof carrying one is
-- refused. Rows past their expiry are pruned.
CREATE TABLE siwx_nonces (
    nonce   TEXT PRIMARY KEY NOT NULL,
    expires INTEGER NOT NULL -- unix seconds
);
CREATE INDEX siwx_nonces_by_expiry ON siwx_nonces (expires);

-- Purchases made before this table existed entitle their payers too, normalised as the
-- paywall records them (an EVM 0x address lower-cased).
INSERT INTO entitlements (resource, address, purchased)
SELECT resource,
       CASE WHEN length(payer) = 42 AND lower(substr(payer, 1, 2)) = '0x'
            THEN lower(payer) ELSE payer END,
       MAX(issued)
FROM orders
WHERE payer IS NOT NULL
GROUP BY 1, 2;
