-- Secrets the store generates once and every process shares: `fulfillment` is the key each
-- order's fulfillment key is derived from when STORE_FULFILLMENT_SECRET is unset, so a
-- re-delivery hands out the same key after a restart.
CREATE TABLE store_secrets (
    name  TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
