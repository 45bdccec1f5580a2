use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One extension value in its usual `{info, schema}` shape.
///
/// Keys besides `info` and `schema` (some extensions put e.g. `supportedChains` beside them) are
/// kept in [`other`](Self::other) and written back unchanged.
///
/// ```
/// use serde_json::json;
/// use x402_wire::Extension;
///
/// let ext = Extension::new(json!({"required": false}), json!({"type": "object"}));
/// assert_eq!(serde_json::to_value(&ext)?, json!({"info": {"required": false}, "schema": {"type": "object"}}));
/// # Ok::<_, serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extension {
    /// Extension data; a client may add to it but never remove or overwrite.
    pub info: Value,
    /// JSON Schema (draft 2020-12) that `info` must satisfy.
    pub schema: Value,
    /// Any further keys, preserved as received.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Extension {
    /// An extension with the given `info` and `schema` and nothing else.
    pub fn new(info: Value, schema: Value) -> Self {
        Self {
            info,
            schema,
            other: Map::new(),
        }
    }

    /// This extension as a JSON value, ready to insert into an `extensions` map (extension key → value).
    pub fn into_value(self) -> Value {
        let mut map = Map::with_capacity(2 + self.other.len());
        map.insert("info".into(), self.info);
        map.insert("schema".into(), self.schema);
        map.extend(self.other);
        Value::Object(map)
    }
}
