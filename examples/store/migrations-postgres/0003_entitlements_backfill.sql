-- Purchases made before sign-in-with-x entitle their payers too. `x402_entitlements` is the
-- layer's table (PostgresEntitlementStore::migrate), created before the store's migrations
-- run; addresses are normalised as the paywall records them (an EVM 0x address lower-cased,
-- base58 as is).
INSERT INTO x402_entitlements (resource, address, purchased)
SELECT resource,
       CASE WHEN length(payer) = 42 AND lower(substr(payer, 1, 2)) = '0x'
            THEN lower(payer) ELSE payer END,
       MAX(issued)
FROM orders
WHERE payer IS NOT NULL
GROUP BY 1, 2
ON CONFLICT (resource, address)
DO UPDATE SET purchased = GREATEST(x402_entitlements.purchased, EXCLUDED.purchased);
