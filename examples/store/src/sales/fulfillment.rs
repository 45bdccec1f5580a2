//! Fulfillment: the files an order unlocks, served at capability URLs.
//!
//! `GET /api/fulfillment/{passport}/{file}?key={secret}` serves `file` of the order behind
//! `passport` to whoever holds a fulfillment key issued with that order. Passport ids are shared
//! as citations, so the id alone unlocks nothing; the key (32 random bytes, base64url) is shown
//! once, in the paid response, and only its SHA-256 is stored.
//!
//! Files come from `config.content_dir/{sku}/` (regular files whose names are letters, digits,
//! `.`, `_` and `-`). Without a content directory for a SKU the store serves one generated
//! sample deliverable, `{sku}-sample.md`, which says plainly that it is a sample.
//!
//! A wrong key and an unknown Passport get the same 403, so the route reveals nothing that
//! `GET /api/passport/{id}` does not already.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::catalog::{Catalog, Sku};
use crate::config::Config;
use crate::http_errors::json_error;
use crate::sales::passport::{self, PassportId};
use crate::storage::{Order, Store, unix_now};

/// Random bytes in a fulfillment key.
const KEY_BYTES: usize = 32;

/// Characters of a fulfillment key (base64url of [`KEY_BYTES`], no padding).
const KEY_CHARS: usize = 43;

const REFUSED: &str = "this fulfillment key does not unlock this Passport's files";

/// A fulfillment key: the secret half of a capability URL.
#[derive(Clone, PartialEq, Eq)]
pub struct FulfillmentKey(String);

impl std::fmt::Debug for FulfillmentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FulfillmentKey(..)")
    }
}

impl FulfillmentKey {
    /// A new random key.
    pub fn generate() -> Self {
        let bytes: [u8; KEY_BYTES] = rand::random();
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The key of the order `passport` under the store's fulfillment `secret`:
    /// base64url(HMAC-SHA256(secret, passport)). Every re-delivery of an order hands out the same
    /// key, so replays add no keys, and it cannot be derived without the secret.
    /// `None` only if HMAC refused the secret, which it never does (it takes any length).
    pub fn derive(secret: &[u8], passport: &str) -> Option<Self> {
        use hmac::{Hmac, Mac as _};
        let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(secret).ok()?;
        mac.update(b"x402-store fulfillment key\0");
        mac.update(passport.as_bytes());
        Some(Self(URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())))
    }

    /// Parses a key as it appears in a URL.
    pub fn parse(text: &str) -> Option<Self> {
        let well_formed = text.len() == KEY_CHARS
            && URL_SAFE_NO_PAD
                .decode(text)
                .is_ok_and(|bytes| bytes.len() == KEY_BYTES);
        well_formed.then(|| Self(text.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the key, hex: what the store keeps.
    pub fn hash(&self) -> String {
        Sha256::digest(self.0.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

/// One file of an order, as listed in the paid response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileLink {
    /// File name.
    pub name: String,
    /// Absolute capability URL (carries the key).
    pub url: String,
}

/// Where a deliverable's bytes come from.
#[derive(Clone, Debug)]
enum Source {
    File(PathBuf),
    Sample,
}

#[derive(Clone, Debug)]
struct Deliverable {
    name: String,
    source: Source,
}

/// The capability URLs of `sku`'s files for the order `passport`, unlocked by `key`.
pub async fn links(
    config: &Config,
    sku: &Sku,
    passport: &str,
    key: &FulfillmentKey,
) -> Vec<FileLink> {
    deliverables(config, sku)
        .await
        .into_iter()
        .map(|deliverable| FileLink {
            url: link(&config.base_url, passport, &deliverable.name, key),
            name: deliverable.name,
        })
        .collect()
}

/// `{base_url}/api/fulfillment/{passport}/{file}?key={key}`.
pub fn link(base_url: &str, passport: &str, file: &str, key: &FulfillmentKey) -> String {
    format!(
        "{base_url}/api/fulfillment/{passport}/{file}?key={}",
        key.as_str()
    )
}

/// The name of the generated sample deliverable of `slug`.
pub fn sample_name(slug: &str) -> String {
    format!("{slug}-sample.md")
}

async fn deliverables(config: &Config, sku: &Sku) -> Vec<Deliverable> {
    if let Some(dir) = &config.content_dir {
        let files = list_files(&dir.join(&sku.slug)).await;
        if !files.is_empty() {
            return files;
        }
    }
    vec![Deliverable {
        name: sample_name(&sku.slug),
        source: Source::Sample,
    }]
}

/// Regular files with safe names directly inside `dir`, sorted by name.
async fn list_files(dir: &FsPath) -> Vec<Deliverable> {
    let mut files = Vec::new();
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return files;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let is_file = entry.file_type().await.is_ok_and(|kind| kind.is_file());
        if is_file && safe_name(&name) {
            files.push(Deliverable {
                name,
                source: Source::File(entry.path()),
            });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}

fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The generated sample deliverable of an order.
fn sample(sku: &Sku, order: &Order) -> String {
    format!(
        "# {summary}\n\n\
         This is a sample deliverable generated by the example store. It is not the product's \
         content: the store was started without a content directory for this SKU \
         (set STORE_CONTENT_DIR to a directory holding one folder of files per SKU slug).\n\n\
         - SKU: {slug}\n\
         - Description: {description}\n\
         - Passport: {passport} (verify at {verify})\n\
         - Amount: {amount} USDC{demo}\n\
         - Issued: {issued}\n\n\
         A Passport is proof of purchase only, not proof that this file is useful.\n",
        summary = sku.summary,
        slug = sku.slug,
        description = sku.description,
        passport = order.passport,
        verify = passport::verify_path(&order.passport),
        amount = order.amount,
        demo = if order.demo {
            " (demo: settled by the in-process sandbox, no real funds)"
        } else {
            ""
        },
        issued = passport::rfc3339(order.issued),
    )
}

/// The query of a download: the key from the fulfillment URL.
#[derive(Debug, Deserialize)]
pub struct KeyQuery {
    key: Option<String>,
}

/// `GET /api/fulfillment/{passport}/{file}?key=…`: one bought file.
pub async fn download(
    State(catalog): State<Arc<Catalog>>,
    State(config): State<Arc<Config>>,
    State(store): State<Store>,
    Path((passport, file)): Path<(String, String)>,
    query: Result<Query<KeyQuery>, QueryRejection>,
) -> Response {
    let Ok(passport) = PassportId::parse(&passport) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            passport::MalformedPassport.to_string(),
        );
    };
    let Ok(Query(KeyQuery { key })) = query else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "malformed query string: expected ?key=FULFILLMENT_KEY",
        );
    };
    let Some(key) = key else {
        return json_error(
            StatusCode::FORBIDDEN,
            "this download needs the `key` from the fulfillment URL of the purchase response; a Passport id alone unlocks nothing",
        );
    };
    let Some(key) = FulfillmentKey::parse(&key) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "malformed fulfillment key: expected 43 base64url characters",
        );
    };
    let order = match unlock(&store, &passport, &key).await {
        Ok(Some(order)) => order,
        Ok(None) => return json_error(StatusCode::FORBIDDEN, REFUSED),
        Err(response) => return response,
    };
    let Some(sku) = catalog.get(&order.sku) else {
        return json_error(
            StatusCode::NOT_FOUND,
            "this Passport's SKU is no longer in the catalog",
        );
    };
    let Some(deliverable) = deliverables(&config, sku)
        .await
        .into_iter()
        .find(|d| d.name == file)
    else {
        return json_error(
            StatusCode::NOT_FOUND,
            "no file with this name for this Passport",
        );
    };
    let bytes = match &deliverable.source {
        Source::Sample => sample(sku, &order).into_bytes(),
        Source::File(path) => match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::error!(%error, path = %path.display(), "fulfillment file unreadable");
                return json_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "this file cannot be read right now",
                );
            }
        },
    };
    if let Err(error) = store
        .record_download(&order.passport, &deliverable.name, unix_now())
        .await
    {
        tracing::error!(%error, "download not counted");
    }
    file_response(&deliverable.name, bytes)
}

/// The order behind `passport` when `key` is one of its keys; `Err` is the response to send.
async fn unlock(
    store: &Store,
    passport: &PassportId,
    key: &FulfillmentKey,
) -> Result<Option<Order>, Response> {
    let unavailable = |error: crate::storage::StorageError| {
        tracing::error!(%error, "fulfillment lookup failed");
        json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "fulfillment records are unavailable, retry later",
        )
    };
    if !store
        .grant_matches(passport.as_str(), &key.hash())
        .await
        .map_err(unavailable)?
    {
        return Ok(None);
    }
    store
        .order_by_passport(passport.as_str())
        .await
        .map_err(unavailable)
}

fn file_response(name: &str, bytes: Vec<u8>) -> Response {
    let mut response = Body::from(bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    if let Ok(value) = HeaderValue::try_from(format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    // The URL is a capability: keep it out of shared caches and of Referer headers.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-store"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn content_type(name: &str) -> &'static str {
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match extension.as_deref() {
        Some("md") => "text/markdown; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("csv") => "text/csv; charset=utf-8",
        Some("json") => "application/json",
        Some("pdf") => "application/pdf",
        Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_hash() {
        let key = FulfillmentKey::generate();
        assert_eq!(key.as_str().len(), KEY_CHARS);
        assert_eq!(FulfillmentKey::parse(key.as_str()), Some(key.clone()));
        assert_eq!(key.hash().len(), 64);
        assert_ne!(key.hash(), FulfillmentKey::generate().hash());
        assert_eq!(FulfillmentKey::parse("short"), None);
        assert_eq!(FulfillmentKey::parse(&"A".repeat(44)), None);
        assert_eq!(
            FulfillmentKey::parse(&format!("{}=", &"A".repeat(42))),
            None
        );
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        let key = FulfillmentKey("abc".to_owned());
        assert_eq!(
            key.hash(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn only_plain_names_are_served() {
        assert!(safe_name("report-2026.csv"));
        for bad in ["", ".env", "../x", "a/b", "a b", "é.txt"] {
            assert!(!safe_name(bad), "{bad}");
        }
    }
}
