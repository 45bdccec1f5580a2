-- The paywall layer's payment ledger: one row per payment, whatever its state (in progress,
-- settling, in doubt, settled), changed only by compare-and-set on `version`.
CREATE TABLE payment_ledger (
    payment_key TEXT PRIMARY KEY NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    phase       TEXT NOT NULL CHECK (phase IN ('in_progress', 'settling', 'in_doubt', 'settled')),
    state       TEXT NOT NULL, -- PaymentState JSON
    updated     INTEGER NOT NULL -- unix seconds
);
CREATE INDEX payment_ledger_by_phase ON payment_ledger (phase, updated);

-- Settlement records kept before the ledger become settled entries.
INSERT INTO payment_ledger (payment_key, version, phase, state, updated)
SELECT payment_key, 1, 'settled',
       json_object('phase', 'settled', 'record', json_object(
           'key', payment_key, 'fingerprint', fingerprint, 'resource', resource,
           'requirement', json(requirement), 'settlement', json(settlement))),
       created
FROM settlements;

DROP TABLE settlements;
