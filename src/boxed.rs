//! The boxed future and error the crate's object-safe traits use.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what [`Facilitator`](crate::Facilitator) and
/// [`SettlementStore`](crate::SettlementStore) methods return, so that both can be used as trait
/// objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed error from a facilitator transport or a settlement store backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
