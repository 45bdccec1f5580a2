//! What a settled payment buys: the order and its Passport ([`purchase`], [`passport`]), the
//! files ([`fulfillment`], unlocked by a [`fulfillment_key`]), the citation of an earlier buyer
//! ([`referral`]), and the funnel those sales feed ([`standing`]).

pub mod fulfillment;
pub mod fulfillment_key;
pub mod passport;
pub mod purchase;
pub mod referral;
pub mod standing;
