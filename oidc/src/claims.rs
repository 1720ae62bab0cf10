//! A token's claims (its payload, a JSON object), read by name.

use serde_json::{Map, Value};

/// The claims of a token, as its issuer signed them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claims(Map<String, Value>);

impl Claims {
    /// The claims of a JSON object.
    pub fn new(map: Map<String, Value>) -> Self {
        Self(map)
    }

    /// A claim as the token holds it.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// A string claim.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(Value::as_str)
    }

    /// A claim as text: a string as it is, an integer in decimal (GitHub sends `run_id` as a
    /// string; other issuers send numbers). Anything else: none.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
            _ => None,
        }
    }

    /// A NumericDate claim (`exp`, `nbf`, `iat`): seconds since the epoch, integer or not.
    pub fn seconds(&self, name: &str) -> Option<f64> {
        self.0.get(name).and_then(Value::as_f64)
    }

    /// The claims as a JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }
}
