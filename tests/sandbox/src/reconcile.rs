//! The sandbox answers a [`Reconciler`]'s question from its ledger, as a chain would.

use alloy_primitives::B256;
use tower_x402::BoxFuture;
use tower_x402::settlement::{Reconciler, Reconciliation};
use x402_wire::{FacilitatorRequest, PERMIT2_TRANSFER_METHOD};

use crate::SandboxFacilitator;
use crate::eip712::{parse_address, parse_decimal};

impl SandboxFacilitator {
    /// What the ledger says about the payment in `request`: settled (with its transaction) when
    /// the ledger holds a transfer of its authorization to `payTo` for the amount required, not
    /// settled when it holds none.
    ///
    /// For a Permit2 payment (`exact` or `upto`): settled when the ledger holds a transfer of its Permit2 nonce to
    /// `payTo` for the requirement's amount (the amount charged); not settled when it holds none
    /// (a zero charge moves nothing and uses no nonce).
    pub fn reconcile_payment(&self, request: &FacilitatorRequest) -> Reconciliation {
        if crate::solana::is_solana_request(request) {
            // The message is the payment: it landed, or it did not.
            return match self.solana_settlement_of(request) {
                Ok(Some(settlement)) => Reconciliation::Settled {
                    transaction: settlement.transaction,
                },
                Ok(None) => Reconciliation::NotSettled,
                Err(reason) => Reconciliation::Unknown { reason },
            };
        }
        let payload = request.payment_payload();
        if let Ok(upto) = payload.upto_evm() {
            let permit = upto.permit2_authorization;
            return self.reconcile_permit(request, &permit.from, &permit.nonce);
        }
        if let Ok(exact) = payload.exact_permit2() {
            let permit = exact.permit2_authorization;
            return self.reconcile_permit(request, &permit.from, &permit.nonce);
        }
        let Ok(evm) = request.payment_payload().exact_evm() else {
            return Reconciliation::Unknown {
                reason: "not an exact EIP-3009 payment".to_owned(),
            };
        };
        let authorization = &evm.authorization;
        let requirement = request.payment_requirements();
        let (Some(from), Some(asset), Ok(nonce)) = (
            parse_address(&authorization.from),
            parse_address(&requirement.asset),
            authorization.nonce.parse::<B256>(),
        ) else {
            return Reconciliation::Unknown {
                reason: "the authorization's payer, asset or nonce is malformed".to_owned(),
            };
        };
        let found = self.settlements().into_iter().find(|settlement| {
            settlement.transfer_method != PERMIT2_TRANSFER_METHOD
                && settlement.network == requirement.network
                && parse_address(&settlement.asset) == Some(asset)
                && parse_address(&settlement.from) == Some(from)
                && settlement.nonce.parse::<B256>().ok() == Some(nonce)
        });
        match found {
            None => Reconciliation::NotSettled,
            Some(settlement)
                if parse_address(&settlement.to) == parse_address(&requirement.pay_to)
                    && settlement.amount == requirement.amount =>
            {
                Reconciliation::Settled {
                    transaction: settlement.transaction,
                }
            }
            Some(settlement) => Reconciliation::Unknown {
                reason: format!(
                    "the authorization was used in {} for another recipient or amount",
                    settlement.transaction
                ),
            },
        }
    }
}

impl SandboxFacilitator {
    /// A Permit2 permit (`exact` or `upto`) of `from` with `nonce`: Permit2 nonces are the
    /// owner's, whichever proxy spends them.
    fn reconcile_permit(
        &self,
        request: &FacilitatorRequest,
        from: &str,
        nonce: &str,
    ) -> Reconciliation {
        let requirement = request.payment_requirements();
        let (Some(from), Some(nonce)) = (parse_address(from), parse_decimal(nonce).map(B256::from))
        else {
            return Reconciliation::Unknown {
                reason: "the permit's payer or nonce is malformed".to_owned(),
            };
        };
        let found = self.settlements().into_iter().find(|settlement| {
            settlement.transfer_method == PERMIT2_TRANSFER_METHOD
                && settlement.network == requirement.network
                && parse_address(&settlement.from) == Some(from)
                && settlement.nonce.parse::<B256>().ok() == Some(nonce)
        });
        match found {
            None => Reconciliation::NotSettled,
            Some(settlement)
                if parse_address(&settlement.to) == parse_address(&requirement.pay_to)
                    && parse_address(&settlement.asset) == parse_address(&requirement.asset)
                    && settlement.amount == requirement.amount =>
            {
                Reconciliation::Settled {
                    transaction: settlement.transaction,
                }
            }
            Some(settlement) => Reconciliation::Unknown {
                reason: format!(
                    "the permit's nonce was used in {} for another recipient, token or amount",
                    settlement.transaction
                ),
            },
        }
    }
}

impl Reconciler for SandboxFacilitator {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(std::future::ready(self.reconcile_payment(request)))
    }
}
