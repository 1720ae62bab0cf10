//! Who may do what. Upload tokens may be scoped to key prefixes (a CI job's token writes only
//! its own run, `123-linux/`); reads are open unless the server is private, and then need a
//! valid token as `Authorization: Bearer <token>` or as HTTP Basic credentials (the token as
//! the password, or as the user name with an empty password: what pip and apt send for
//! `https://user:token@host/…` URLs and netrc entries).

use axum::http::{HeaderMap, header};
use base64::Engine as _;

use crate::AppError;

/// One accepted token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    secret: String,
    /// Key prefixes this token may write under; empty: anywhere.
    prefixes: Vec<String>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token").field("secret", &"…").field("prefixes", &self.prefixes).finish()
    }
}

impl Token {
    /// A token that may write under `prefixes` (each ends with `/`; none: anywhere).
    pub fn new(secret: impl Into<String>, prefixes: Vec<String>) -> Self {
        let prefixes = prefixes
            .into_iter()
            .map(|p| p.trim_start_matches('/').to_owned())
            .filter(|p| !p.is_empty())
            .map(|p| if p.ends_with('/') { p } else { format!("{p}/") })
            .collect();
        Self { secret: secret.into(), prefixes }
    }

    /// A token file line: `TOKEN [PREFIX …]`; blank lines and `#` comments give `None`.
    pub fn parse_line(line: &str) -> Option<Self> {
        let line = line.split('#').next().unwrap_or_default().trim();
        let mut words = line.split_whitespace();
        let secret = words.next()?;
        Some(Self::new(secret, words.map(str::to_owned).collect()))
    }

    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    fn matches(&self, presented: &str) -> bool {
        constant_time_eq(self.secret.as_bytes(), presented.as_bytes())
    }

    fn may_write(&self, key: &str) -> bool {
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| key.starts_with(p.as_str()))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials a request carries: a bearer token, or the candidates of Basic auth.
fn presented(headers: &HeaderMap) -> Vec<String> {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Vec::new();
    };
    if let Some(token) = value.strip_prefix("Bearer ") {
        return vec![token.trim().to_owned()];
    }
    if let Some(encoded) = value.strip_prefix("Basic ")
        && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim())
        && let Ok(text) = String::from_utf8(decoded)
    {
        let (user, password) = text.split_once(':').unwrap_or((&text, ""));
        return [password, user].into_iter().filter(|s| !s.is_empty()).map(str::to_owned).collect();
    }
    Vec::new()
}

/// The server's tokens and read policy.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub(crate) tokens: Vec<Token>,
    pub(crate) private: bool,
}

impl Access {
    fn find(&self, headers: &HeaderMap) -> Option<&Token> {
        let presented = presented(headers);
        self.tokens.iter().find(|t| presented.iter().any(|p| t.matches(p)))
    }

    /// A write of `key`: 403 without tokens configured or outside the token's prefixes, 401
    /// without a valid token.
    pub fn authorize_write(&self, headers: &HeaderMap, key: &str) -> Result<(), AppError> {
        if self.tokens.is_empty() {
            return Err(AppError::Forbidden(
                "uploads are disabled: start the server with --token-file or QUARRY_TOKEN set".into(),
            ));
        }
        if headers.get(header::AUTHORIZATION).is_none() {
            return Err(AppError::Unauthorized("uploads need an 'Authorization: Bearer <token>' header".into()));
        }
        let token = self.find(headers).ok_or_else(|| AppError::Unauthorized("the upload token is not valid".into()))?;
        if token.may_write(key) {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!("this token may write only under {}", token.prefixes.join(", "))))
        }
    }

    /// A read: open unless the server is private; then any valid token.
    pub fn authorize_read(&self, headers: &HeaderMap) -> Result<(), AppError> {
        if !self.private || self.find(headers).is_some() {
            return Ok(());
        }
        Err(AppError::Unauthenticated(if headers.get(header::AUTHORIZATION).is_some() {
            "the credentials are not valid".into()
        } else {
            "this store is private: send a token (Authorization: Bearer <token>, or Basic auth with the token as password)"
                .into()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn token_lines_and_scopes() {
        assert_eq!(Token::parse_line("  # comment"), None);
        let t = Token::parse_line("s3cret 123-linux /124-linux/ # ci").unwrap();
        assert_eq!(t.prefixes(), ["123-linux/", "124-linux/"]);
        assert!(t.may_write("123-linux/python/a.whl") && !t.may_write("125-linux/x") && !t.may_write("123-linux2/x"));
        assert!(Token::parse_line("all").unwrap().may_write("anything"));
    }

    #[test]
    fn writes_and_private_reads() {
        let access = Access {
            tokens: vec![Token::new("ci", vec!["123-linux".into()]), Token::new("admin", vec![])],
            private: true,
        };
        assert!(access.authorize_write(&headers("Bearer ci"), "123-linux/a.whl").is_ok());
        let err = access.authorize_write(&headers("Bearer ci"), "124-linux/a.whl").unwrap_err();
        assert!(matches!(err, AppError::Forbidden(ref m) if m.contains("123-linux/")), "{err:?}");
        assert!(matches!(access.authorize_write(&headers("Bearer nope"), "x"), Err(AppError::Unauthorized(_))));
        assert!(matches!(access.authorize_write(&HeaderMap::new(), "x"), Err(AppError::Unauthorized(_))));

        assert!(matches!(access.authorize_read(&HeaderMap::new()), Err(AppError::Unauthenticated(_))));
        assert!(access.authorize_read(&headers("Bearer ci")).is_ok());
        let basic = |s: &str| headers(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s)));
        assert!(access.authorize_read(&basic("__token__:admin")).is_ok());
        assert!(access.authorize_read(&basic("admin:")).is_ok());
        assert!(access.authorize_read(&basic("user:wrong")).is_err());
        assert!(Access { private: false, ..access }.authorize_read(&HeaderMap::new()).is_ok());
    }
}
