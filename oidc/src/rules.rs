//! `[[trusted_publisher]]` rules: which tokens may mint an upload token, and where it may
//! write. A rule names its `issuer` (exact) and `repository` (`OWNER/NAME`, compared as GitHub
//! does, ignoring case), and optionally the `workflow` file (`release.yml`: the token's
//! `job_workflow_ref` must be `{repository}/.github/workflows/{workflow}@…`), the `ref`
//! (exact) and the `environment` (ignoring case); its `prefix` is where the minted token may
//! write, `{claim}` replaced by the token's claim. A token matching no rule is refused naming
//! the first claim that differed from the closest rule (the one it matched furthest).
//!
//! Invariant: a minted scope is a real key prefix that ends in `-` or `/` (so run 12's is not
//! the start of run 123's), and a substituted claim is one safe key word (`[A-Za-z0-9._-]`,
//! never `.` or `..`): a token's claims can never widen or redirect the scope.

use std::fmt;

use crate::Claims;

/// A rule as written, checked ([`Rule::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The token's `iss`, exactly.
    pub issuer: String,
    /// `OWNER/NAME`.
    pub repository: String,
    /// The workflow file name (`release.yml`).
    pub workflow: Option<String>,
    /// The token's `ref` (`refs/heads/main`), exactly.
    pub git_ref: Option<String>,
    /// The token's `environment`.
    pub environment: Option<String>,
    /// Where a minted token may write.
    pub prefix: PrefixTemplate,
    /// Where the rule is written (a line of `quarry.toml`), for messages.
    pub line: usize,
}

/// A rule that cannot be used; [`RuleError::field`] says which key is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Not an issuer Quarry fetches keys from.
    #[error("issuer {0:?} is neither https:// nor http:// to a loopback address")]
    Issuer(String),
    /// Not `OWNER/NAME`.
    #[error("repository {0:?} is not OWNER/NAME")]
    Repository(String),
    /// Not a workflow file name.
    #[error("workflow {0:?} is not a workflow file name such as release.yml (no directory, ending in .yml or .yaml)")]
    Workflow(String),
    /// An optional key given empty.
    #[error("{0} is empty: leave it out to accept any")]
    Empty(&'static str),
    /// The prefix template is unusable.
    #[error("prefix {template:?} {why}")]
    Prefix {
        /// The template as written.
        template: String,
        /// What is wrong with it.
        why: String,
    },
}

impl RuleError {
    /// The key at fault: `issuer`, `repository`, `workflow`, `ref`, `environment` or `prefix`.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Issuer(_) => "issuer",
            Self::Repository(_) => "repository",
            Self::Workflow(_) => "workflow",
            Self::Empty(key) => key,
            Self::Prefix { .. } => "prefix",
        }
    }
}

/// The claims a rule looks at, in the order they are checked.
const CHECKED: [&str; 5] = ["iss", "repository", "job_workflow_ref", "ref", "environment"];

impl Rule {
    /// A rule from its keys, each checked; `line` is where it is written.
    pub fn new(
        issuer: &str,
        repository: &str,
        workflow: Option<&str>,
        git_ref: Option<&str>,
        environment: Option<&str>,
        prefix: &str,
        line: usize,
    ) -> Result<Self, RuleError> {
        if !crate::fetchable_url(issuer) {
            return Err(RuleError::Issuer(issuer.to_owned()));
        }
        let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        match repository.split_once('/') {
            Some((owner, name)) if word(owner) && word(name) && name != "." && name != ".." => {}
            _ => return Err(RuleError::Repository(repository.to_owned())),
        }
        if let Some(w) = workflow
            && (w.contains(['/', '\\', '@']) || !(w.ends_with(".yml") || w.ends_with(".yaml")) || w.len() < 5)
        {
            return Err(RuleError::Workflow(w.to_owned()));
        }
        for (key, value) in [("workflow", workflow), ("ref", git_ref), ("environment", environment)] {
            if value.is_some_and(|v| v.trim().is_empty()) {
                return Err(RuleError::Empty(key));
            }
        }
        Ok(Self {
            issuer: issuer.to_owned(),
            repository: repository.to_owned(),
            workflow: workflow.map(str::to_owned),
            git_ref: git_ref.map(str::to_owned),
            environment: environment.map(str::to_owned),
            prefix: PrefixTemplate::parse(prefix)?,
            line,
        })
    }

    /// How many of [`CHECKED`] the claims pass before the first that differs (all: they match).
    fn passed(&self, claims: &Claims) -> usize {
        let same = |claim: &str, want: &str| claims.str(claim) == Some(want);
        let same_case = |claim: &str, want: &str| claims.str(claim).is_some_and(|v| v.eq_ignore_ascii_case(want));
        let checks = [
            same("iss", &self.issuer),
            same_case("repository", &self.repository),
            self.workflow.as_deref().is_none_or(|w| {
                let want = format!("{}/.github/workflows/{w}@", self.repository).to_ascii_lowercase();
                claims.str("job_workflow_ref").is_some_and(|v| v.to_ascii_lowercase().starts_with(&want))
            }),
            self.git_ref.as_deref().is_none_or(|r| same("ref", r)),
            self.environment.as_deref().is_none_or(|e| same_case("environment", e)),
        ];
        checks.iter().take_while(|ok| **ok).count()
    }

    /// What this rule wants of `claim` (for the server's log; not sent to clients).
    fn wanted(&self, claim: &str) -> String {
        match claim {
            "iss" => self.issuer.clone(),
            "repository" => self.repository.clone(),
            "job_workflow_ref" => {
                format!("{}/.github/workflows/{}@…", self.repository, self.workflow.as_deref().unwrap_or("*"))
            }
            "ref" => self.git_ref.clone().unwrap_or_default(),
            _ => self.environment.clone().unwrap_or_default(),
        }
    }
}

/// Why no rule matched: the closest rule's first differing claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The claim (`repository`, `job_workflow_ref`, `ref`, `environment`, `iss`).
    pub claim: &'static str,
    /// The token's value of it (none: the token lacks it).
    pub found: Option<String>,
    /// What the rule wants (for the server's log).
    pub wanted: String,
    /// The closest rule's line.
    pub line: usize,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.found {
            Some(v) => write!(f, "claim {} {v:?} differs from the closest rule's (line {})", self.claim, self.line),
            None => {
                write!(f, "the token has no {} claim, which the closest rule (line {}) requires", self.claim, self.line)
            }
        }
    }
}

/// The first rule `claims` match, else the closest rule's first differing claim (none: no
/// rules).
pub fn find<'a>(rules: &'a [Rule], claims: &Claims) -> Result<&'a Rule, Option<Mismatch>> {
    let mut closest: Option<(usize, &Rule)> = None;
    for rule in rules {
        let passed = rule.passed(claims);
        if passed == CHECKED.len() {
            return Ok(rule);
        }
        if closest.is_none_or(|(best, _)| passed > best) {
            closest = Some((passed, rule));
        }
    }
    Err(closest.map(|(passed, rule)| {
        let claim = CHECKED[passed];
        Mismatch { claim, found: claims.text(claim), wanted: rule.wanted(claim), line: rule.line }
    }))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Claim(String),
}

/// A prefix with `{claim}` placeholders (`{run_id}-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixTemplate {
    parts: Vec<Part>,
}

/// Why a matching token's claims cannot fill the prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The token lacks a claim the prefix names.
    #[error("the token has no {0} claim for the prefix")]
    Missing(String),
    /// A claim that is not one safe key word.
    #[error("claim {claim} {value:?} is not a key word (letters, digits, '.', '_', '-')")]
    Unsafe {
        /// The claim.
        claim: String,
        /// Its value.
        value: String,
    },
}

fn safe_word(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

impl PrefixTemplate {
    /// Parse a template; see the module's invariant for what it must be.
    pub fn parse(template: &str) -> Result<Self, RuleError> {
        let bad = |why: &str| Err(RuleError::Prefix { template: template.to_owned(), why: why.to_owned() });
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('{') {
                let Some((name, tail)) = after.split_once('}') else { return bad("has a { without its }") };
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
                    return bad(&format!("has placeholder {{{name}}}, which is no claim name"));
                }
                parts.push(Part::Claim(name.to_owned()));
                rest = tail;
            } else {
                let end = rest.find('{').unwrap_or(rest.len());
                let text = &rest[..end];
                if text.contains('}') {
                    return bad("has a } without its {");
                }
                if text.chars().any(|c| c == '\\' || c.is_control() || c.is_whitespace()) {
                    return bad("holds a backslash, whitespace or a control character");
                }
                parts.push(Part::Text(text.to_owned()));
                rest = &rest[end..];
            }
        }
        let template_ok = Self { parts };
        let shape = template_ok.fill(|_| Some("x".to_owned())).unwrap_or_default();
        if shape.is_empty() {
            return bad("is empty: a minted token must be scoped");
        }
        if !matches!(template_ok.parts.last(), Some(Part::Text(t)) if t.ends_with('-') || t.ends_with('/')) {
            return bad("must end with '-' or '/' (else run 12's prefix would also cover run 123's)");
        }
        if shape.starts_with('/') || !segments_ok(&shape) {
            return bad("has a leading '/', or an empty, '.' or '..' segment");
        }
        Ok(template_ok)
    }

    fn fill(&self, mut value: impl FnMut(&str) -> Option<String>) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Claim(c) => out.push_str(&value(c)?),
            }
        }
        Some(out)
    }

    /// The prefix for `claims`: each placeholder replaced by its claim (as text), which must be
    /// one safe key word.
    pub fn render(&self, claims: &Claims) -> Result<String, PrefixError> {
        let mut error = None;
        let filled = self.fill(|name| {
            let value = claims.text(name);
            match value {
                Some(v) if safe_word(&v) => Some(v),
                Some(v) => {
                    error = Some(PrefixError::Unsafe { claim: name.to_owned(), value: v });
                    None
                }
                None => {
                    error = Some(PrefixError::Missing(name.to_owned()));
                    None
                }
            }
        });
        match (filled, error) {
            (Some(prefix), None) if segments_ok(&prefix) => Ok(prefix),
            (_, Some(e)) => Err(e),
            (Some(prefix), None) => Err(PrefixError::Unsafe { claim: "(prefix)".into(), value: prefix }),
            (None, None) => Err(PrefixError::Missing(String::new())),
        }
    }
}

/// Every `/`-separated segment but a trailing empty one is a real name.
fn segments_ok(prefix: &str) -> bool {
    let body = prefix.strip_suffix('/').unwrap_or(prefix);
    body.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Who a minted token acts for, from the claims of the token it was minted with: what an audit
/// log names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    /// `iss`.
    pub issuer: String,
    /// `repository`.
    pub repository: String,
    /// `job_workflow_ref` (else `workflow_ref`).
    pub workflow: Option<String>,
    /// `ref`.
    pub git_ref: Option<String>,
    /// `environment`.
    pub environment: Option<String>,
    /// `run_id`.
    pub run_id: Option<String>,
    /// `run_attempt`.
    pub run_attempt: Option<String>,
    /// `actor`.
    pub actor: Option<String>,
}

impl Identity {
    /// The identity in `claims`.
    pub fn of(claims: &Claims) -> Self {
        let text = |name| claims.text(name);
        Self {
            issuer: text("iss").unwrap_or_default(),
            repository: text("repository").unwrap_or_default(),
            workflow: text("job_workflow_ref").or_else(|| text("workflow_ref")),
            git_ref: text("ref"),
            environment: text("environment"),
            run_id: text("run_id"),
            run_attempt: text("run_attempt"),
            actor: text("actor"),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oidc {}", self.repository)?;
        let fields = [
            ("workflow", &self.workflow),
            ("environment", &self.environment),
            ("run", &self.run_id),
            ("attempt", &self.run_attempt),
            ("actor", &self.actor),
        ];
        for (name, value) in fields {
            if let Some(v) = value {
                write!(f, " {name} {v}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const GITHUB: &str = "https://token.actions.githubusercontent.com";

    fn claims(v: serde_json::Value) -> Claims {
        Claims::new(v.as_object().unwrap().clone())
    }

    fn github(repo: &str, workflow: &str, git_ref: &str, environment: Option<&str>) -> Claims {
        let mut v = json!({
            "iss": GITHUB,
            "repository": repo,
            "job_workflow_ref": format!("{repo}/.github/workflows/{workflow}@{git_ref}"),
            "ref": git_ref,
            "run_id": "12345",
            "run_attempt": "1",
            "actor": "octocat",
        });
        if let Some(e) = environment {
            v["environment"] = json!(e);
        }
        claims(v)
    }

    fn rule(workflow: Option<&str>, git_ref: Option<&str>, environment: Option<&str>, line: usize) -> Rule {
        Rule::new(GITHUB, "ROCm/TheRock", workflow, git_ref, environment, "{run_id}-", line).unwrap()
    }

    #[test]
    fn the_matching_rule_or_the_closest_ones_first_differing_claim() {
        let rules = [
            rule(Some("release.yml"), Some("refs/heads/main"), Some("release"), 3),
            rule(Some("ci.yml"), None, None, 10),
        ];
        let release = github("ROCm/TheRock", "release.yml", "refs/heads/main", Some("Release"));
        assert_eq!(find(&rules, &release).unwrap().line, 3, "environment ignores case");
        let ci = github("rocm/therock", "ci.yml", "refs/pull/7/merge", None);
        assert_eq!(find(&rules, &ci).unwrap().line, 10, "repository ignores case; any ref");
        let m = find(&rules, &github("ROCm/TheRock", "release.yml", "refs/heads/dev", Some("release"))).unwrap_err();
        let m = m.unwrap();
        assert_eq!((m.claim, m.found.as_deref(), m.line), ("ref", Some("refs/heads/dev"), 3));
        assert_eq!(m.to_string(), "claim ref \"refs/heads/dev\" differs from the closest rule's (line 3)");
        let m = find(&rules, &github("ROCm/TheRock", "release.yml", "refs/heads/main", None)).unwrap_err().unwrap();
        assert_eq!((m.claim, m.found, m.line), ("environment", None, 3));
        let m = find(&rules, &github("evil/TheRock", "release.yml", "refs/heads/main", None)).unwrap_err().unwrap();
        assert_eq!((m.claim, m.found.as_deref()), ("repository", Some("evil/TheRock")));
        // Another repository's workflow of the same name (a reusable workflow) is not this one's.
        let mut other = github("ROCm/TheRock", "ci.yml", "refs/heads/main", None);
        let mut map = other.as_map().clone();
        map.insert("job_workflow_ref".into(), json!("evil/x/.github/workflows/ci.yml@refs/heads/main"));
        other = Claims::new(map);
        let m = find(&rules, &other).unwrap_err().unwrap();
        assert_eq!((m.claim, m.line), ("job_workflow_ref", 3));
        let mut map = release.as_map().clone();
        map.insert("iss".into(), json!("https://gitlab.com"));
        let m = find(&rules, &Claims::new(map)).unwrap_err().unwrap();
        assert_eq!(m.claim, "iss");
        assert_eq!(find(&[], &release), Err(None));
    }

    #[test]
    fn rules_are_checked_naming_the_key() {
        let make = |issuer: &str, repo: &str, workflow: Option<&str>, prefix: &str| {
            Rule::new(issuer, repo, workflow, None, None, prefix, 1).unwrap_err()
        };
        assert_eq!(make("http://github.com", "a/b", None, "{run_id}-").field(), "issuer");
        for repo in ["ab", "a/b/c", "/b", "a/", "a/..", "a b/c"] {
            assert_eq!(make(GITHUB, repo, None, "{run_id}-").field(), "repository", "{repo}");
        }
        for workflow in ["x/release.yml", "release", "a@b.yml", ".yml"] {
            assert_eq!(make(GITHUB, "a/b", Some(workflow), "{run_id}-").field(), "workflow", "{workflow}");
        }
        let err = Rule::new(GITHUB, "a/b", None, Some(""), None, "x/", 1).unwrap_err();
        assert_eq!(err.to_string(), "ref is empty: leave it out to accept any");
        for (prefix, why) in [
            ("", "is empty: a minted token must be scoped"),
            ("{run_id}", "must end with '-' or '/' (else run 12's prefix would also cover run 123's)"),
            ("run", "must end with '-' or '/' (else run 12's prefix would also cover run 123's)"),
            ("{run_id-", "has a { without its }"),
            ("run}-", "has a } without its {"),
            ("{Run}-", "has placeholder {Run}, which is no claim name"),
            ("/{run_id}-", "has a leading '/', or an empty, '.' or '..' segment"),
            ("a//{run_id}-", "has a leading '/', or an empty, '.' or '..' segment"),
            ("../{run_id}-", "has a leading '/', or an empty, '.' or '..' segment"),
            ("a b/", "holds a backslash, whitespace or a control character"),
        ] {
            let err = make(GITHUB, "a/b", None, prefix);
            assert_eq!(err, RuleError::Prefix { template: prefix.into(), why: why.into() }, "{prefix}");
        }
    }

    #[test]
    fn prefixes_take_safe_claims_only() {
        let template = PrefixTemplate::parse("{run_id}-").unwrap();
        assert_eq!(template.render(&claims(json!({"run_id": "12345"}))).unwrap(), "12345-");
        assert_eq!(template.render(&claims(json!({"run_id": 12345}))).unwrap(), "12345-", "numbers as text");
        assert_eq!(template.render(&claims(json!({}))), Err(PrefixError::Missing("run_id".into())));
        for value in ["../x", "a/b", "..", ".", "", "a b", "x\\y"] {
            let err = template.render(&claims(json!({"run_id": value}))).unwrap_err();
            assert_eq!(err, PrefixError::Unsafe { claim: "run_id".into(), value: value.into() }, "{value}");
        }
        let deep = PrefixTemplate::parse("ci/{repository_owner}/{run_id}-{run_attempt}/").unwrap();
        let c = claims(json!({"repository_owner": "ROCm", "run_id": "7", "run_attempt": "2"}));
        assert_eq!(deep.render(&c).unwrap(), "ci/ROCm/7-2/");
    }

    #[test]
    fn identities_name_the_run() {
        let c = github("ROCm/TheRock", "release.yml", "refs/heads/main", Some("release"));
        let id = Identity::of(&c);
        assert_eq!(
            id.to_string(),
            "oidc ROCm/TheRock workflow ROCm/TheRock/.github/workflows/release.yml@refs/heads/main environment release run 12345 attempt 1 actor octocat"
        );
    }
}
