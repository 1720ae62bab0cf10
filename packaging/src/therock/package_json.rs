//! TheRock's `package.json`: an array of package descriptions (spec §7). Keys are matched
//! without regard to case; flags are strings (`"True"`, `"yes"`, `"1"`, …) or JSON booleans.
//! Every schema problem is an error naming the package (or its index) and the key.

use serde_json::Value;

/// Strings that make a flag true (TheRock's `is_key_defined`).
const TRUTHY: &[&str] = &["1", "true", "t", "yes", "y", "on", "enable", "enabled", "found"];

/// One entry of `Artifactory`: an artifact and the subdirectories of it the package takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRef {
    pub artifact: String,
    /// `Artifact_Gfxarch`: overrides whether this artifact's content is per GPU target.
    pub gfxarch: Option<bool>,
    pub subdirs: Vec<ArtifactSubdir>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactSubdir {
    /// Matched (case-insensitively) against manifest lines as `"{name}/"`.
    pub name: String,
    /// `lib`, `run`, `dev`, `doc`, `dbg`, `test`.
    pub components: Vec<String>,
}

/// One package description.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackageSpec {
    pub package: String,
    pub architecture: String,
    pub build_arch: String,
    pub deb_depends: Vec<String>,
    pub rpm_requires: Vec<String>,
    pub deb_recommends: Vec<String>,
    pub deb_suggests: Vec<String>,
    pub rpm_recommends: Vec<String>,
    pub rpm_suggests: Vec<String>,
    pub provides: Vec<String>,
    pub replaces: Vec<String>,
    pub conflicts: Vec<String>,
    pub obsoletes: Vec<String>,
    pub maintainer: String,
    pub description_short: String,
    pub description_long: String,
    pub section: String,
    pub priority: String,
    pub group: String,
    pub license: String,
    pub vendor: String,
    pub homepage: String,
    pub gfxarch: bool,
    pub metapackage: bool,
    pub postinstall: bool,
    pub disable_packaging: bool,
    pub disable_debug_package: bool,
    pub disable_dwz: bool,
    pub disable_deb_strip: bool,
    pub disable_rpm_strip: bool,
    pub artifactory: Vec<ArtifactRef>,
}

/// A problem with `package.json`, naming where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("package.json is not valid JSON: {0}")]
    Json(String),
    #[error("package.json must be an array of package objects, found {0}")]
    NotAnArray(&'static str),
    #[error("{package}: key {key:?}: {problem}")]
    Key { package: String, key: String, problem: String },
    #[error("{package}: {problem}")]
    Package { package: String, problem: String },
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field reader for one JSON object with case-insensitive keys.
struct Fields<'a> {
    package: String,
    map: &'a serde_json::Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn err(&self, key: &str, problem: impl Into<String>) -> SchemaError {
        SchemaError::Key { package: self.package.clone(), key: key.to_owned(), problem: problem.into() }
    }

    /// The value of `key` (any case); two spellings of one key are an error.
    fn get(&self, key: &str) -> Result<Option<&'a Value>, SchemaError> {
        let mut found = self.map.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key));
        let first = found.next();
        if let Some((other, _)) = found.next() {
            return Err(self.err(key, format!("given twice (also as {other:?})")));
        }
        Ok(first.map(|(_, v)| v))
    }

    fn string(&self, key: &str) -> Result<String, SchemaError> {
        match self.get(key)? {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.err(key, format!("expected a string, found {}", kind(other)))),
        }
    }

    fn list(&self, key: &str) -> Result<Vec<String>, SchemaError> {
        match self.get(key)? {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                    Value::String(_) => Err(self.err(key, format!("item {i} is empty"))),
                    other => Err(self.err(key, format!("item {i}: expected a string, found {}", kind(other)))),
                })
                .collect(),
            Some(other) => Err(self.err(key, format!("expected an array of strings, found {}", kind(other)))),
        }
    }

    fn flag(&self, key: &str) -> Result<bool, SchemaError> {
        match self.get(key)? {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) => Ok(TRUTHY.contains(&s.trim().to_ascii_lowercase().as_str())),
            Some(other) => {
                Err(self.err(key, format!("expected a flag string such as \"True\", found {}", kind(other))))
            }
        }
    }
}

/// Keys a package object may have (any case).
const KNOWN_KEYS: &[&str] = &[
    "Package",
    "Version",
    "Architecture",
    "BuildArch",
    "DEBDepends",
    "RPMRequires",
    "DEBRecommends",
    "DEBSuggests",
    "RPMRecommends",
    "RPMSuggests",
    "Provides",
    "Replaces",
    "Conflicts",
    "Obsoletes",
    "Maintainer",
    "Description_Short",
    "Description_Long",
    "Section",
    "Priority",
    "Group",
    "License",
    "Vendor",
    "Homepage",
    "Gfxarch",
    "Metapackage",
    "Postinstall",
    "DisablePackaging",
    "Disable_Debug_Package",
    "Disable_DWZ",
    "Disable_DEB_STRIP",
    "Disable_RPM_STRIP",
    "Comments",
    "Artifactory",
    // Legacy top-level artifact description (only on disabled entries).
    "Artifact",
    "Components",
];

fn parse_artifact(fields: &Fields<'_>, i: usize, value: &Value) -> Result<ArtifactRef, SchemaError> {
    let key = format!("Artifactory[{i}]");
    let Value::Object(map) = value else {
        return Err(fields.err(&key, format!("expected an object, found {}", kind(value))));
    };
    let inner = Fields { package: fields.package.clone(), map };
    let artifact = inner.string("Artifact")?;
    if artifact.is_empty() || artifact.contains(['/', '\\']) || artifact.contains("..") {
        return Err(fields.err(&format!("{key}.Artifact"), format!("invalid artifact name {artifact:?}")));
    }
    let gfxarch = match inner.get("Artifact_Gfxarch")? {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::String(s)) => Some(s.trim().eq_ignore_ascii_case("true")),
        Some(other) => {
            return Err(fields.err(
                &format!("{key}.Artifact_Gfxarch"),
                format!("expected \"True\"/\"False\", found {}", kind(other)),
            ));
        }
    };
    let mut subdirs = Vec::new();
    match inner.get("Artifact_Subdir")? {
        Some(Value::Array(items)) => {
            for (j, item) in items.iter().enumerate() {
                let at = format!("{key}.Artifact_Subdir[{j}]");
                let Value::Object(map) = item else {
                    return Err(fields.err(&at, format!("expected an object, found {}", kind(item))));
                };
                let sub = Fields { package: fields.package.clone(), map };
                let name = sub.string("Name").map_err(|_| fields.err(&format!("{at}.Name"), "expected a string"))?;
                if name.is_empty() {
                    return Err(fields.err(&format!("{at}.Name"), "missing"));
                }
                let components = sub.list("Components").map_err(|e| match e {
                    SchemaError::Key { problem, .. } => fields.err(&format!("{at}.Components"), problem),
                    other => other,
                })?;
                for c in &components {
                    if !crate::therock::COMPONENTS.contains(&c.as_str()) {
                        return Err(fields.err(
                            &format!("{at}.Components"),
                            format!(
                                "unknown component {c:?} (expected one of {})",
                                crate::therock::COMPONENTS.join(", ")
                            ),
                        ));
                    }
                }
                subdirs.push(ArtifactSubdir { name, components });
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => {
            return Err(
                fields.err(&format!("{key}.Artifact_Subdir"), format!("expected an array, found {}", kind(other)))
            );
        }
    }
    Ok(ArtifactRef { artifact, gfxarch, subdirs })
}

fn parse_package(i: usize, value: &Value) -> Result<PackageSpec, SchemaError> {
    let Value::Object(map) = value else {
        return Err(SchemaError::Package {
            package: format!("entry {i}"),
            problem: format!("expected an object, found {}", kind(value)),
        });
    };
    let name = map.iter().find(|(k, _)| k.eq_ignore_ascii_case("Package")).and_then(|(_, v)| v.as_str());
    let package = match name {
        Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
        _ => {
            return Err(SchemaError::Key {
                package: format!("entry {i}"),
                key: "Package".into(),
                problem: "missing or not a string".into(),
            });
        }
    };
    let valid = package.len() >= 2
        && package.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
        && package.as_bytes()[0].is_ascii_alphanumeric();
    if !valid {
        return Err(SchemaError::Key {
            package: package.clone(),
            key: "Package".into(),
            problem: "not a valid package name (lowercase letters, digits, + - .)".into(),
        });
    }
    let fields = Fields { package: package.clone(), map };
    for key in map.keys() {
        if !KNOWN_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            return Err(fields.err(key, "unknown key"));
        }
    }
    // Version is never taken from here (the CLI gives it), but it must be a string.
    fields.string("Version")?;
    fields.string("Comments")?;
    let mut artifactory = Vec::new();
    match fields.get("Artifactory")? {
        Some(Value::Array(items)) => {
            for (j, item) in items.iter().enumerate() {
                artifactory.push(parse_artifact(&fields, j, item)?);
            }
        }
        None | Some(Value::Null) => {}
        Some(other) => return Err(fields.err("Artifactory", format!("expected an array, found {}", kind(other)))),
    }
    let spec = PackageSpec {
        architecture: fields.string("Architecture")?,
        build_arch: fields.string("BuildArch")?,
        deb_depends: fields.list("DEBDepends")?,
        rpm_requires: fields.list("RPMRequires")?,
        deb_recommends: fields.list("DEBRecommends")?,
        deb_suggests: fields.list("DEBSuggests")?,
        rpm_recommends: fields.list("RPMRecommends")?,
        rpm_suggests: fields.list("RPMSuggests")?,
        provides: fields.list("Provides")?,
        replaces: fields.list("Replaces")?,
        conflicts: fields.list("Conflicts")?,
        obsoletes: fields.list("Obsoletes")?,
        maintainer: fields.string("Maintainer")?,
        description_short: fields.string("Description_Short")?,
        description_long: fields.string("Description_Long")?,
        section: fields.string("Section")?,
        priority: fields.string("Priority")?,
        group: fields.string("Group")?,
        license: fields.string("License")?,
        vendor: fields.string("Vendor")?,
        homepage: fields.string("Homepage")?,
        gfxarch: fields.flag("Gfxarch")?,
        metapackage: fields.flag("Metapackage")?,
        postinstall: fields.flag("Postinstall")?,
        disable_packaging: fields.flag("DisablePackaging")?,
        disable_debug_package: fields.flag("Disable_Debug_Package")?,
        disable_dwz: fields.flag("Disable_DWZ")?,
        disable_deb_strip: fields.flag("Disable_DEB_STRIP")?,
        disable_rpm_strip: fields.flag("Disable_RPM_STRIP")?,
        artifactory,
        package,
    };
    if !spec.disable_packaging {
        for (key, value) in [("Architecture", &spec.architecture), ("BuildArch", &spec.build_arch)] {
            if value.is_empty() {
                return Err(fields.err(key, "missing"));
            }
        }
        if spec.artifactory.is_empty() && !spec.metapackage {
            return Err(fields.err("Artifactory", "a package that is not a Metapackage needs at least one artifact"));
        }
    }
    Ok(spec)
}

/// Parse `package.json`; entries must have distinct names.
pub fn parse_package_json(text: &str) -> Result<Vec<PackageSpec>, SchemaError> {
    let value: Value = serde_json::from_str(text).map_err(|e| SchemaError::Json(e.to_string()))?;
    let Value::Array(items) = value else {
        return Err(SchemaError::NotAnArray(kind(&value)));
    };
    let mut specs: Vec<PackageSpec> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let spec = parse_package(i, item)?;
        if specs.iter().any(|s| s.package == spec.package) {
            return Err(SchemaError::Package { package: spec.package, problem: "described twice".into() });
        }
        specs.push(spec);
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = include_str!("../../data/therock/package.json");

    #[test]
    fn the_real_file_parses() {
        let specs = parse_package_json(REAL).unwrap();
        assert_eq!(specs.len(), 81);
        let fft = specs.iter().find(|s| s.package == "amdrocm-fft").unwrap();
        assert!(fft.gfxarch && !fft.metapackage);
        assert_eq!(fft.deb_depends, ["libc6", "amdrocm-runtime", "amdrocm-sysdeps"]);
        assert_eq!(fft.artifactory[0].artifact, "fft");
        let disabled = specs.iter().filter(|s| s.disable_packaging).count();
        assert!(disabled >= 1);
        assert!(specs.iter().any(|s| s.metapackage && s.package == "amdrocm"));
    }

    fn err(json: &str) -> String {
        parse_package_json(json).unwrap_err().to_string()
    }

    #[test]
    fn schema_problems_name_the_package_and_key() {
        let base = r#""Architecture":"amd64","BuildArch":"x86_64","Artifactory":[{"Artifact":"x","Artifact_Subdir":[{"Name":"x","Components":["lib"]}]}]"#;
        insta::assert_snapshot!(
            [
                err("{}"),
                err("[1]"),
                err(r#"[{"Version":""}]"#),
                err(&format!(r#"[{{"Package":"Bad_Name",{base}}}]"#)),
                err(&format!(r#"[{{"Package":"pkg-a","DEBDepend":["x"],{base}}}]"#)),
                err(&format!(r#"[{{"Package":"pkg-a","DEBDepends":"libc6",{base}}}]"#)),
                err(&format!(r#"[{{"Package":"pkg-a","DEBDepends":["libc6", 3],{base}}}]"#)),
                err(&format!(r#"[{{"Package":"pkg-a","Gfxarch":["yes"],{base}}}]"#)),
                err(&format!(r#"[{{"Package":"pkg-a","gfxarch":"True","GfxArch":"False",{base}}}]"#)),
                err(r#"[{"Package":"pkg-a","Architecture":"amd64","BuildArch":"x86_64"}]"#),
                err(r#"[{"Package":"pkg-a","Architecture":"amd64","BuildArch":"x86_64","Artifactory":[{"Artifact":"../x"}]}]"#),
                err(r#"[{"Package":"pkg-a","Architecture":"amd64","BuildArch":"x86_64","Artifactory":[{"Artifact":"x","Artifact_Subdir":[{"Name":"x","Components":["bin"]}]}]}]"#),
                err(&format!(r#"[{{"Package":"pkg-a",{base}}},{{"Package":"pkg-a",{base}}}]"#)),
            ]
            .join("\n")
        );
    }

    #[test]
    fn keys_ignore_case_and_flags_take_truthy_strings() {
        let json = r#"[{"package":"pkg-a","ARCHITECTURE":"amd64","buildarch":"x86_64","metapackage":"Yes","gfxArch":true,"Postinstall":"off"}]"#;
        let spec = &parse_package_json(json).unwrap()[0];
        assert!(spec.metapackage && spec.gfxarch && !spec.postinstall);
        assert_eq!(spec.architecture, "amd64");
    }
}
