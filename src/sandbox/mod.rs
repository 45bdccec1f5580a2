//! In-process stand-in facilitator and payer wallet.
