//! Maps keyed by [`PaymentKey`] that hash nothing again: a key carries the hash it was given
//! when it was made (keyed by a random seed per process), and the map uses that number as it is.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::record::PaymentKey;

/// A map keyed by [`PaymentKey`], each lookup using the hash the key carries.
pub(crate) type KeyMap<V> = HashMap<PaymentKey, V, CarriedHash>;

/// The [`BuildHasher`] of a [`KeyMap`]: the hash a [`PaymentKey`] writes is the map's hash. The
/// key's hash is already keyed per process, so a payer who picks the nonce and `from` still
/// cannot choose keys that collide.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CarriedHash;

impl BuildHasher for CarriedHash {
    type Hasher = Carried;

    fn build_hasher(&self) -> Carried {
        Carried(0)
    }
}

/// Holds the one `u64` a [`PaymentKey`] writes.
#[derive(Debug)]
pub(crate) struct Carried(u64);

impl Hasher for Carried {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn write(&mut self, bytes: &[u8]) {
        // A `PaymentKey` writes only its `u64`; anything else is folded in, never dropped.
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher as _;

    use super::*;

    #[test]
    fn a_key_is_hashed_as_the_number_it_carries() {
        let key = PaymentKey::from_stored("eip3009:eip155:8453:0xa:0xb:0x1");
        let again = PaymentKey::from_stored(String::from("eip3009:eip155:8453:0xa:0xb:0x1"));
        assert_eq!(CarriedHash.hash_one(&key), CarriedHash.hash_one(&again));
        assert_ne!(
            CarriedHash.hash_one(&key),
            CarriedHash.hash_one(PaymentKey::from_stored("eip3009:eip155:8453:0xa:0xb:0x2"))
        );
        let mut map = KeyMap::default();
        map.insert(key, 1);
        assert_eq!(map.get(&again), Some(&1));
    }
}
