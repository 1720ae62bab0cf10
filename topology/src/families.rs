//! GPU targets and families: which gfx targets a family such as `gfx94X-dcgpu` names. The
//! facts come from `therock_add_amdgpu_target(<target> "<product>" FAMILY <families…>)` calls,
//! TheRock's `cmake/therock_amdgpu_targets.cmake` syntax; a project can bring its own file, and
//! `topology/data/amdgpu_targets.cmake` is built in. Every target is also a family of its own.

use std::collections::BTreeMap;

use crate::TopologyError;

const BUILTIN: &str = include_str!("../data/amdgpu_targets.cmake");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInfo {
    pub target: String,
    pub product: String,
    /// Explicit families (the target's own name is implied).
    pub families: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdgpuTargets {
    pub targets: Vec<TargetInfo>,
}

impl AmdgpuTargets {
    /// The built-in table (TheRock's targets).
    pub fn builtin() -> Self {
        // Checked by a unit test; the file is part of the binary.
        Self::parse_cmake(BUILTIN, "built-in amdgpu_targets.cmake").expect("the built-in target table parses")
    }

    /// Parse every `therock_add_amdgpu_target(...)` call in a CMake file; `origin` names the
    /// file in errors.
    pub fn parse_cmake(text: &str, origin: &str) -> Result<Self, TopologyError> {
        const CALL: &str = "therock_add_amdgpu_target(";
        let text = strip_comments(text);
        let mut targets: Vec<TargetInfo> = Vec::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(CALL) {
            let body_start = at + CALL.len();
            let (tokens, consumed) = tokenize_call(&rest[body_start..])
                .ok_or_else(|| TopologyError::Targets(origin.to_owned(), "an unterminated call".into()))?;
            rest = &rest[body_start + consumed..];
            // The function definition itself (`function(therock_add_amdgpu_target gfx_target …)`)
            // has no `(` right after the name, so it is not matched here.
            let [target, product, args @ ..] = tokens.as_slice() else {
                return Err(TopologyError::Targets(origin.to_owned(), "a call without target and product".into()));
            };
            if targets.iter().any(|t| &t.target == target) {
                return Err(TopologyError::Targets(origin.to_owned(), format!("target {target} is defined twice")));
            }
            let families = match args.iter().position(|a| a == "FAMILY") {
                Some(i) => args[i + 1..].iter().take_while(|a| *a != "EXCLUDE_TARGET_PROJECTS").cloned().collect(),
                None => Vec::new(),
            };
            targets.push(TargetInfo { target: target.clone(), product: product.clone(), families });
        }
        if targets.is_empty() {
            return Err(TopologyError::Targets(origin.to_owned(), "no therock_add_amdgpu_target() calls".into()));
        }
        Ok(Self { targets })
    }

    /// Family → its targets, in definition order (a target is its own family).
    pub fn family_map(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut map: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for t in &self.targets {
            for family in std::iter::once(&t.target).chain(&t.families) {
                let entry = map.entry(family.as_str()).or_default();
                if !entry.contains(&t.target.as_str()) {
                    entry.push(t.target.as_str());
                }
            }
        }
        map
    }

    /// Refuse names that are neither a family nor a target, suggesting the right spelling.
    pub fn check(&self, families: &[String]) -> Result<(), TopologyError> {
        let map = self.family_map();
        let unknown: Vec<String> = families
            .iter()
            .filter(|f| !map.contains_key(f.as_str()))
            .map(|f| match map.keys().find(|k| k.eq_ignore_ascii_case(f)) {
                Some(k) => format!("{f} (did you mean {k}?)"),
                None => f.clone(),
            })
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let known: Vec<&str> = map.keys().copied().filter(|k| !k.starts_with("gfx") || k.contains('-')).collect();
        Err(TopologyError::UnknownFamilies(format!(
            "famil{} {}; known families: {} (or a single target such as {})",
            if unknown.len() == 1 { "y" } else { "ies" },
            unknown.join(", "),
            known.join(", "),
            self.targets.first().map_or("gfx942", |t| t.target.as_str()),
        )))
    }

    /// The union of the families' targets, in request order (strict: unknown names fail).
    pub fn expand(&self, families: &[String]) -> Result<Vec<String>, TopologyError> {
        self.check(families)?;
        let map = self.family_map();
        let mut out: Vec<String> = Vec::new();
        for f in families {
            for t in &map[f.as_str()] {
                if !out.iter().any(|o| o == t) {
                    out.push((*t).to_owned());
                }
            }
        }
        Ok(out)
    }
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_quote = false;
        for c in line.chars() {
            match c {
                '"' => in_quote = !in_quote,
                '#' if !in_quote => break,
                _ => {}
            }
            out.push(c);
        }
        out.push('\n');
    }
    out
}

/// The arguments of one call up to its closing `)`: whitespace separated, `"…"` quoted.
/// Returns the tokens and the bytes consumed, or None when the call never closes.
fn tokenize_call(body: &str) -> Option<(Vec<String>, usize)> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_quote = false;
    let mut quoted = false;
    for (i, c) in body.char_indices() {
        match c {
            '"' => {
                in_quote = !in_quote;
                quoted = true;
            }
            ')' if !in_quote => {
                if !current.is_empty() || quoted {
                    tokens.push(std::mem::take(&mut current));
                }
                return Some((tokens, i + 1));
            }
            c if c.is_whitespace() && !in_quote => {
                if !current.is_empty() || quoted {
                    tokens.push(std::mem::take(&mut current));
                }
                quoted = false;
            }
            c => current.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn builtin_families_expand_to_their_targets() {
        let t = AmdgpuTargets::builtin();
        assert_eq!(t.expand(&names(&["gfx94X-dcgpu", "gfx120X-all"])).unwrap(), ["gfx942", "gfx1200", "gfx1201"]);
        assert_eq!(t.expand(&names(&["gfx110X-all"])).unwrap(), ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]);
        assert_eq!(
            t.expand(&names(&["gfx1151", "gfx115X-all"])).unwrap(),
            ["gfx1151", "gfx1150", "gfx1152", "gfx1153"]
        );
        let map = t.family_map();
        assert!(map["dcgpu-all"].contains(&"gfx950"));
    }

    #[test]
    fn unknown_families_are_named_with_a_suggestion() {
        let t = AmdgpuTargets::builtin();
        let err = t.check(&names(&["gfx94x-dcgpu", "famZ"])).unwrap_err().to_string();
        assert!(
            err.starts_with("unknown GPU families gfx94x-dcgpu (did you mean gfx94X-dcgpu?), famZ; known families:"),
            "{err}"
        );
        assert!(err.contains("gfx110X-all"), "{err}");
    }

    #[test]
    fn a_project_file_with_comments_quotes_and_keywords() {
        let text = r#"
            # a comment with therock_add_amdgpu_target(fake "x")
            function(therock_add_amdgpu_target gfx_target product_name)
            endfunction()
            therock_add_amdgpu_target(gfxA "Product (A) # not a comment" FAMILY famA all
              EXCLUDE_TARGET_PROJECTS foo # why
            )
            therock_add_amdgpu_target(gfxB "B" FAMILY famB all)
        "#;
        let t = AmdgpuTargets::parse_cmake(text, "cmake/therock_amdgpu_targets.cmake").unwrap();
        assert_eq!(t.targets[0].product, "Product (A) # not a comment");
        assert_eq!(t.targets[0].families, ["famA", "all"]);
        assert_eq!(t.expand(&names(&["all"])).unwrap(), ["gfxA", "gfxB"]);
        let dup = format!("{text}\ntherock_add_amdgpu_target(gfxB \"again\")");
        assert!(AmdgpuTargets::parse_cmake(&dup, "f").unwrap_err().to_string().contains("gfxB is defined twice"));
        assert!(AmdgpuTargets::parse_cmake("therock_add_amdgpu_target(gfxC \"C\"", "f").is_err());
    }
}
