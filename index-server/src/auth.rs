//! Who may do what. Upload tokens may be scoped to key prefixes (a CI job's token writes only
//! its own run, `123-linux/`); reads are open unless the server is private, and then need a
//! valid token as `Authorization: Bearer <token>` or as HTTP Basic credentials (the token as
//! the password, or as the user name with an empty password: what pip and apt send for
//! `https://user:token@host/…` URLs and netrc entries). Scheme
//! names are case-insensitive (RFC 9110 §11.1). `PUT` writes take a Bearer token only; the
//! legacy upload form that twine and uv publish POST also takes the token as Basic credentials
//! (user `__token__`), as PyPI does. Either way the token's scope is checked the same, for a
//! configured token and for one minted by trusted publishing (`oidc`; it also names whom it
//! acts for: [`Token::oidc_identity`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use quarry_store::Sha256Hex;

use crate::AppError;

/// One accepted token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    secret: String,
    /// Key prefixes this token may write under; empty: anywhere.
    prefixes: Vec<String>,
    /// The name the audit log records (`name=NAME` on its token file line).
    name: Option<String>,
    /// Minted by trusted publishing (`oidc`): whom it acts for.
    oidc: Option<Arc<quarry_oidc::Identity>>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Token");
        s.field("secret", &"…").field("prefixes", &self.prefixes).field("name", &self.name);
        if let Some(identity) = &self.oidc {
            s.field("oidc", identity);
        }
        s.finish()
    }
}

/// A token scope that names no part of the store in particular (`/`, `//`), or a path no key
/// can start with (`a//b`, `..`): refused, never read as "anywhere".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("prefix {prefix:?} {reason}")]
pub struct BadScope {
    pub prefix: String,
    pub reason: &'static str,
}

/// A scope prefix as keys are compared with it: no leading `/`, one trailing `/`.
fn scope_prefix(prefix: &str) -> Result<String, BadScope> {
    let bad = |reason| Err(BadScope { prefix: prefix.to_owned(), reason });
    let trimmed = prefix.trim_start_matches('/');
    let body = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if body.is_empty() {
        return bad("names the whole store: leave the prefixes out for a token that may write anywhere");
    }
    if body.contains('\\') || body.chars().any(char::is_control) {
        return bad("holds a backslash or a control character");
    }
    if body.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return bad("has an empty, `.` or `..` segment");
    }
    Ok(format!("{body}/"))
}

impl Token {
    /// A token that may write anywhere.
    pub fn unscoped(secret: impl Into<String>) -> Self {
        Self { secret: secret.into(), prefixes: Vec::new(), name: None, oidc: None }
    }

    /// A token minted by trusted publishing for `identity`: it may write only keys starting
    /// with `prefix` as it is (`12345-`: the rule's prefix, already checked to end in `-` or
    /// `/`).
    pub fn minted(secret: String, prefix: String, identity: quarry_oidc::Identity) -> Self {
        Self { secret, prefixes: vec![prefix], name: None, oidc: Some(Arc::new(identity)) }
    }

    /// Whom a token minted by trusted publishing acts for (the OIDC repository, workflow, run,
    /// actor); none for a configured token.
    pub fn oidc_identity(&self) -> Option<&quarry_oidc::Identity> {
        self.oidc.as_deref()
    }

    /// A token that may write under `prefixes` (each stored with one trailing `/`; none:
    /// anywhere). A prefix naming the whole store (`/`) or no possible key (`a//b`, `..`) is
    /// refused: a scope is either absent or real.
    pub fn new(secret: impl Into<String>, prefixes: Vec<String>) -> Result<Self, BadScope> {
        let prefixes = prefixes.iter().map(|p| scope_prefix(p)).collect::<Result<_, _>>()?;
        Ok(Self { secret: secret.into(), prefixes, name: None, oidc: None })
    }

    /// A token file line: `TOKEN [PREFIX …] [name=NAME]`, words separated by whitespace. A `#`
    /// starts a comment only at the start of a word (a line's start, or after whitespace), so
    /// `abc#def` is one token; blank and comment lines give `None`; a bad prefix is an error.
    pub fn parse_line(line: &str) -> Result<Option<Self>, BadScope> {
        let mut words = line.split_whitespace().take_while(|w| !w.starts_with('#'));
        let Some(secret) = words.next() else { return Ok(None) };
        let (names, prefixes): (Vec<&str>, Vec<&str>) = words.partition(|w| w.starts_with("name="));
        let mut token = Self::new(secret, prefixes.into_iter().map(str::to_owned).collect())?;
        token.name = names.last().map(|n| n["name=".len()..].to_owned()).filter(|n| !n.is_empty());
        Ok(Some(token))
    }

    /// Who acts with this token, as the audit log records it: its name, else `token:` and a
    /// fingerprint of the secret (stable, and telling nothing of it).
    pub fn identity(&self) -> String {
        match (&self.oidc, &self.name) {
            (Some(identity), _) => identity.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => format!("token:{}", &quarry_store::sha256_hex(self.secret.as_bytes())[..12]),
        }
    }

    /// Whether this token may read the audit log: an unscoped token may.
    pub(crate) fn may_read_audit(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// The secret a client sends.
    pub fn secret(&self) -> &str {
        &self.secret
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

    /// A write of `key` with this token: 403 outside its prefixes.
    pub(crate) fn authorize(&self, key: &str) -> Result<(), AppError> {
        if self.may_write(key) {
            Ok(())
        } else {
            Err(AppError::Forbidden(format!("this token may write only under {}", self.prefixes.join(", "))))
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Most minted tokens held at once; past it the tenth expiring first goes.
pub(crate) const MAX_MINTED: usize = 10_000;

/// The minted tokens still valid, by the SHA-256 of their secret.
#[derive(Debug, Default)]
pub(crate) struct MintedTokens {
    held: Mutex<HashMap<String, (Token, SystemTime)>>,
}

fn digest(secret: &str) -> String {
    let mut hasher = Sha256Hex::default();
    hasher.update(secret.as_bytes());
    hasher.finish()
}

impl MintedTokens {
    /// Hold `token` until `expires`. At [`MAX_MINTED`] the expired ones go, then (all still
    /// valid) the tenth expiring first: one pass per [`MAX_MINTED`] / 10 mints, not per mint.
    pub(crate) fn insert(&self, token: Token, expires: SystemTime) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() >= MAX_MINTED {
            let now = SystemTime::now();
            held.retain(|_, (_, until)| *until > now);
        }
        if held.len() >= MAX_MINTED {
            let mut by_expiry: Vec<(SystemTime, String)> =
                held.iter().map(|(k, (_, until))| (*until, k.clone())).collect();
            let cut = MAX_MINTED / 10;
            by_expiry.select_nth_unstable(cut);
            for (_, key) in &by_expiry[..=cut] {
                held.remove(key);
            }
        }
        held.insert(digest(token.secret()), (token, expires));
    }

    /// The valid minted token among `candidates`, if any.
    pub(crate) fn find(&self, candidates: &[String]) -> Option<Token> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let now = SystemTime::now();
        candidates.iter().find_map(|c| held.get(&digest(c)).filter(|(_, until)| *until > now).map(|(t, _)| t.clone()))
    }
}

/// Which credentials a write endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteAuth {
    /// `PUT`: `Authorization: Bearer <token>` only.
    BearerOnly,
    /// The legacy upload form (twine, uv publish): Bearer, or HTTP Basic with the token as the
    /// password (user `__token__`) or as the user name with an empty password.
    BearerOrBasic,
}

/// The credentials of an `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    Bearer(String),
    /// The candidates of Basic auth: the password, then the user name.
    Basic(Vec<String>),
    None,
}

/// `Authorization: <scheme> <credentials>`, the scheme compared case-insensitively.
fn presented(headers: &HeaderMap) -> Credentials {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Credentials::None;
    };
    let value = value.trim();
    let (scheme, rest) = value.split_once([' ', '\t']).unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return Credentials::Bearer(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic")
        && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest)
        && let Ok(text) = String::from_utf8(decoded)
    {
        let (user, password) = text.split_once(':').unwrap_or((&text, ""));
        return Credentials::Basic([password, user].into_iter().filter(|s| !s.is_empty()).map(str::to_owned).collect());
    }
    Credentials::None
}

/// The server's tokens and read policy.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub(crate) tokens: Vec<Token>,
    pub(crate) private: bool,
    /// Tokens minted by trusted publishing (when it is configured).
    pub(crate) minted: Option<Arc<MintedTokens>>,
}

impl Access {
    fn find(&self, candidates: &[String]) -> Option<Token> {
        let configured = self.tokens.iter().find(|t| candidates.iter().any(|p| t.matches(p)));
        configured.cloned().or_else(|| self.minted.as_ref()?.find(candidates))
    }

    /// A write of `key`: 403 without tokens configured or outside the token's prefixes, 401
    /// without a valid Bearer token (Basic credentials are for reads only).
    pub fn authorize_write(&self, headers: &HeaderMap, key: &str) -> Result<(), AppError> {
        self.writer(headers, WriteAuth::BearerOnly)?.authorize(key)
    }

    /// The token a write presents, before its key is known: 403 without tokens configured,
    /// 401 without valid credentials. `auth` says which schemes the endpoint takes.
    pub(crate) fn writer(&self, headers: &HeaderMap, auth: WriteAuth) -> Result<Token, AppError> {
        if self.tokens.is_empty() && self.minted.is_none() {
            return Err(AppError::Forbidden(
                "uploads are disabled: start the server with --token-file or QUARRY_TOKEN set".into(),
            ));
        }
        let candidates = match (presented(headers), auth) {
            (Credentials::Bearer(token), _) => vec![token],
            (Credentials::Basic(candidates), WriteAuth::BearerOrBasic) => candidates,
            (Credentials::Basic(_), WriteAuth::BearerOnly) => {
                return Err(AppError::Unauthorized(
                    "uploads need an 'Authorization: Bearer <token>' header; Basic credentials are accepted for reads only"
                        .into(),
                ));
            }
            (Credentials::None, WriteAuth::BearerOnly) => {
                return Err(AppError::Unauthorized("uploads need an 'Authorization: Bearer <token>' header".into()));
            }
            (Credentials::None, WriteAuth::BearerOrBasic) => {
                return Err(AppError::Unauthorized(
                    "uploads need credentials: user __token__ with the upload token as password".into(),
                ));
            }
        };
        self.find(&candidates).ok_or_else(|| AppError::Unauthorized("the upload token is not valid".into()))
    }

    /// A read: open unless the server is private; then any valid token.
    pub fn authorize_read(&self, headers: &HeaderMap) -> Result<(), AppError> {
        if !self.private {
            return Ok(());
        }
        let candidates = match presented(headers) {
            Credentials::Bearer(token) => vec![token],
            Credentials::Basic(candidates) => candidates,
            Credentials::None => Vec::new(),
        };
        if self.find(&candidates).is_some() {
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
        let line = |l: &str| Token::parse_line(l).unwrap();
        assert_eq!(line("  # comment"), None);
        assert_eq!(line("#abc def"), None);
        assert_eq!(line(""), None);
        let t = line("s3cret 123-linux /124-linux/ # ci").unwrap();
        assert_eq!(t.prefixes(), ["123-linux/", "124-linux/"]);
        assert!(t.may_write("123-linux/python/a.whl") && !t.may_write("125-linux/x") && !t.may_write("123-linux2/x"));
        assert!(line("all").unwrap().may_write("anything"));
        // A `#` inside a word is part of it; one after whitespace starts a comment.
        assert_eq!(line("abc#def"), Some(Token::unscoped("abc#def")));
        assert_eq!(line("tok # comment"), Some(Token::unscoped("tok")));
        assert_eq!(line("tok\t#comment 123-linux/"), Some(Token::unscoped("tok")));
        assert_eq!(line("  a#b 7-linux/ #x"), Token::new("a#b", vec!["7-linux/".into()]).ok());
        assert_eq!(line("abc#def").unwrap().secret(), "abc#def");
        // A name for the audit log, anywhere after the secret; else a fingerprint.
        let named = line("s3cret 123-linux/ name=ci-linux # ci").unwrap();
        assert_eq!((named.prefixes(), named.identity().as_str()), (&["123-linux/".to_owned()][..], "ci-linux"));
        assert_eq!(line("s3cret").unwrap().identity(), line("s3cret 1-linux/").unwrap().identity());
        assert_eq!(line("s3cret").unwrap().identity().len(), "token:".len() + 12);
        assert!(line("s3cret").unwrap().identity().starts_with("token:"));
        assert_ne!(line("s3cret").unwrap().identity(), line("other").unwrap().identity());
        assert!(!line("s3cret").unwrap().identity().contains("s3cret"));
    }

    #[test]
    fn a_scope_that_names_no_prefix_is_refused_not_widened() {
        for (l, prefix) in [
            ("TOKEN /", "/"),
            ("TOKEN //", "//"),
            ("TOKEN ///", "///"),
            ("TOKEN 1-linux/ /", "/"),
            ("TOKEN a//b", "a//b"),
            ("TOKEN ../x", "../x"),
            ("TOKEN 1-linux/./", "1-linux/./"),
            ("TOKEN a\\b", "a\\b"),
        ] {
            let err = Token::parse_line(l).unwrap_err();
            assert_eq!(err.prefix, prefix, "{l}");
        }
        insta::assert_snapshot!(
            Token::parse_line("TOKEN //").unwrap_err(),
            @r#"prefix "//" names the whole store: leave the prefixes out for a token that may write anywhere"#
        );
        assert_eq!(Token::new("t", vec!["/1-linux".into()]).unwrap().prefixes(), ["1-linux/"]);
    }

    #[test]
    fn schemes_are_case_insensitive() {
        let access = Access { tokens: vec![Token::unscoped("t0k")], private: true, minted: None };
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let h = headers(&format!("{scheme} t0k"));
            assert!(access.authorize_write(&h, "r/python/a.whl").is_ok(), "{scheme}");
            assert!(access.authorize_read(&h).is_ok(), "{scheme}");
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode("user:t0k");
        for scheme in ["Basic", "basic", "BASIC"] {
            assert!(access.authorize_read(&headers(&format!("{scheme} {encoded}"))).is_ok(), "{scheme}");
        }
        // Extra whitespace between scheme and credentials is tolerated; a scheme alone is not a token.
        assert!(access.authorize_read(&headers("Bearer   t0k")).is_ok());
        assert!(access.authorize_read(&headers("Bearer")).is_err());
        assert!(access.authorize_read(&headers("Token t0k")).is_err());
    }

    #[test]
    fn writes_take_bearer_tokens_only() {
        let access = Access { tokens: vec![Token::unscoped("t0k")], private: false, minted: None };
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("__token__:t0k"));
        let err = access.authorize_write(&headers(&basic), "r/python/a.whl").unwrap_err();
        assert!(matches!(err, AppError::Unauthorized(_)), "{err:?}");
        insta::assert_snapshot!(err, @"uploads need an 'Authorization: Bearer <token>' header; Basic credentials are accepted for reads only");
        assert!(access.authorize_write(&headers("bearer t0k"), "r/python/a.whl").is_ok());
    }

    #[test]
    fn writes_and_private_reads() {
        let access = Access {
            tokens: vec![Token::new("ci", vec!["123-linux".into()]).unwrap(), Token::unscoped("admin")],
            private: true,
            minted: None,
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

    #[test]
    fn minted_tokens_are_bounded_and_expire() {
        use std::time::Duration;
        let tokens = MintedTokens::default();
        let now = SystemTime::now();
        let identity = quarry_oidc::Identity::of(&quarry_oidc::Claims::default());
        let token = |i: usize| Token::minted(format!("s{i}"), format!("{i}-"), identity.clone());
        tokens.insert(token(0), now - Duration::from_secs(1));
        assert_eq!(tokens.find(&["s0".into()]), None, "expired");
        for i in 1..=MAX_MINTED + 5 {
            tokens.insert(token(i), now + Duration::from_secs(60 + i as u64));
        }
        let held = tokens.held.lock().unwrap().len();
        assert!(held <= MAX_MINTED && held > MAX_MINTED * 8 / 10, "{held}");
        assert_eq!(tokens.find(&["s1".into()]), None, "the ones expiring first went");
        assert!(tokens.find(&[format!("s{}", MAX_MINTED)]).is_some(), "the later ones stay");
        let last = tokens.find(&["nope".into(), format!("s{}", MAX_MINTED + 5)]).unwrap();
        assert_eq!(last.prefixes(), [format!("{}-", MAX_MINTED + 5)]);
        assert_eq!(last.oidc_identity(), Some(&identity));
    }
}
