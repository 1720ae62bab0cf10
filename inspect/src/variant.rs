//! Wheel variants (PEP 825, with PEP 817's background): a variant wheel's
//! `*.dist-info/variant.json`, validated against its filename's label, and the release's
//! index-level `{name}-{version}-variants.json` merged from every variant wheel present.
//!
//! Two shapes are accepted, both as `variantlib` writes or reads them: PEP 825's (priorities
//! with optional `feature` / `property` orders, no providers) and its successor with a
//! `providers` table (what `variantlib` 0.2.2 validates: every namespace has a provider). Pure:
//! no I/O; the bytes come from `wheel.rs`, the merge runs in the plan.
//!
//! A release's variant wheels merge ([`VariantMetadata::merge`]) when they share `$schema`,
//! their namespace orders prefix each other (the longer one is kept), feature and value orders
//! and providers agree where both name a namespace, and a label both hold has the same
//! properties. A variant wheel whose metadata does not merge with the release's others is
//! rejected by the indexer with the reason (it stays out of the pages and the state remembers
//! why); a release with variants publishes `{name}-{version}-variants.json` beside its wheels,
//! linked on every page that lists them (project pages and the find-links page).

use std::collections::{BTreeMap, BTreeSet};

use quarry_packaging::{NULL_VARIANT_LABEL, is_variant_label};
use serde::{Deserialize, Serialize};

/// The member name of a wheel's variant metadata, inside its `.dist-info` directory.
pub const VARIANT_JSON: &str = "variant.json";
/// Refuse `variant.json` members larger than this (declared or actual).
pub const MAX_VARIANT_JSON: u64 = 1024 * 1024;
/// The content type the index-level file is published with.
pub const JSON: &str = "application/json";

/// `{namespace: {feature: [values]}}`: one variant's properties.
pub type Properties = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// A `variant.json` (one variant) or `{name}-{version}-variants.json` (all of a release's).
/// Maps are ordered, so the same metadata always serializes to the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantMetadata {
    #[serde(rename = "$schema")]
    pub schema: String,
    #[serde(rename = "default-priorities")]
    pub default_priorities: DefaultPriorities,
    /// The successor format's provider table, by namespace, kept as written (`requires`,
    /// `plugin-api`, `optional`, `static-properties`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<BTreeMap<String, serde_json::Map<String, serde_json::Value>>>,
    /// By variant label.
    pub variants: BTreeMap<String, Properties>,
}

/// `default-priorities`: the namespaces in decreasing priority, and PEP 825's optional
/// feature and value orders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultPriorities {
    pub namespace: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub property: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

/// Why variant metadata is refused. Messages are written for the uploader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariantError {
    #[error("the variant wheel has no .dist-info/{VARIANT_JSON} (PEP 825 requires one)")]
    Missing,
    #[error("{VARIANT_JSON} is not valid variant metadata: {0}")]
    Json(String),
    #[error("{VARIANT_JSON}: {0}")]
    Invalid(String),
    #[error("{VARIANT_JSON} disagrees with the release's other variant wheels: {0}")]
    Disagrees(String),
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'_')
}

fn is_value(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'_' || b == b'.')
}

fn invalid(msg: String) -> VariantError {
    VariantError::Invalid(msg)
}

impl VariantMetadata {
    /// Parse and validate the `variant.json` of a wheel whose filename carries `label`: one
    /// variant, under that label, with valid names and every namespace prioritized.
    pub fn parse_wheel(raw: &[u8], label: &str) -> Result<Self, VariantError> {
        let metadata: Self = serde_json::from_slice(raw).map_err(|e| VariantError::Json(e.to_string()))?;
        metadata.validate()?;
        let labels: Vec<&String> = metadata.variants.keys().collect();
        if labels != [label] {
            return Err(invalid(format!(
                "variants must hold exactly the filename's label {label:?}; it holds {labels:?}"
            )));
        }
        Ok(metadata)
    }

    /// The properties of `label`, if this metadata has that variant.
    pub fn properties(&self, label: &str) -> Option<&Properties> {
        self.variants.get(label)
    }

    fn validate(&self) -> Result<(), VariantError> {
        if !self.schema.starts_with("https://") || !self.schema.ends_with(".json") {
            return Err(invalid(format!("$schema {:?} is not a JSON schema URL", self.schema)));
        }
        let namespaces = &self.default_priorities.namespace;
        let set: BTreeSet<&String> = namespaces.iter().collect();
        if set.len() != namespaces.len() {
            return Err(invalid(format!("default-priorities.namespace lists a namespace twice: {namespaces:?}")));
        }
        if let Some(bad) = namespaces.iter().find(|n| !is_name(n)) {
            return Err(invalid(format!("namespace {bad:?} is not made of 0-9, a-z and _")));
        }
        self.validate_orders(&set)?;
        if let Some(providers) = &self.providers {
            let provided: BTreeSet<&String> = providers.keys().collect();
            if provided != set {
                return Err(invalid(format!(
                    "providers must name the same namespaces as default-priorities.namespace: {provided:?} vs {set:?}"
                )));
            }
        }
        for (label, properties) in &self.variants {
            validate_variant(label, properties, &set)?;
        }
        Ok(())
    }

    fn validate_orders(&self, namespaces: &BTreeSet<&String>) -> Result<(), VariantError> {
        let DefaultPriorities { feature, property, .. } = &self.default_priorities;
        for (namespace, features) in feature {
            if !namespaces.contains(namespace) || features.iter().any(|f| !is_name(f)) {
                return Err(invalid(format!(
                    "default-priorities.feature.{namespace} is not a known namespace's features"
                )));
            }
        }
        for (namespace, features) in property {
            let ok = namespaces.contains(namespace)
                && features.iter().all(|(f, values)| is_name(f) && values.iter().all(|v| is_value(v)));
            if !ok {
                return Err(invalid(format!(
                    "default-priorities.property.{namespace} is not a known namespace's values"
                )));
            }
        }
        Ok(())
    }

    /// Merge `other` (another wheel's metadata, or a release's) into this one, as PEP 825's
    /// index-level generation does: the same `$schema`; the longer namespace order when one
    /// starts with the other; feature and value orders and providers equal where both name a
    /// namespace; a label present in both with the same properties. Anything else disagrees,
    /// and `self` is left as it was.
    pub fn merge(&mut self, other: &Self) -> Result<(), VariantError> {
        let disagree = |msg: String| Err(VariantError::Disagrees(msg));
        if self.schema != other.schema {
            return disagree(format!("$schema {:?} here, {:?} in the release", other.schema, self.schema));
        }
        let (mine, theirs) = (&self.default_priorities.namespace, &other.default_priorities.namespace);
        let (short, long) = if mine.len() <= theirs.len() { (mine, theirs) } else { (theirs, mine) };
        if long[..short.len()] != short[..] {
            return disagree(format!(
                "default-priorities.namespace {theirs:?} is not compatible with the release's {mine:?} (one must start with the other)"
            ));
        }
        let mut merged = self.clone();
        merged.default_priorities.namespace = long.clone();
        union(&mut merged.default_priorities.feature, &other.default_priorities.feature, "default-priorities.feature")?;
        union(
            &mut merged.default_priorities.property,
            &other.default_priorities.property,
            "default-priorities.property",
        )?;
        match (&mut merged.providers, &other.providers) {
            (Some(mine), Some(theirs)) => union(mine, theirs, "providers")?,
            (None, None) => {}
            _ => return disagree("one variant wheel lists providers and another does not".into()),
        }
        for (label, properties) in &other.variants {
            match merged.variants.get(label) {
                Some(existing) if existing != properties => {
                    return disagree(format!(
                        "label {label:?} means {} here but {} in the release",
                        describe(properties),
                        describe(existing)
                    ));
                }
                Some(_) => {}
                None => {
                    merged.variants.insert(label.clone(), properties.clone());
                }
            }
        }
        *self = merged;
        Ok(())
    }

    /// The bytes of the index-level file: pretty JSON, keys in order, a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("variant metadata serializes");
        out.push(b'\n');
        out
    }
}

/// Add `theirs`' keys to `mine`; a key in both must hold the same value.
fn union<V: PartialEq + Clone + std::fmt::Debug>(
    mine: &mut BTreeMap<String, V>,
    theirs: &BTreeMap<String, V>,
    what: &str,
) -> Result<(), VariantError> {
    for (key, value) in theirs {
        match mine.get(key) {
            Some(existing) if existing != value => {
                return Err(VariantError::Disagrees(format!(
                    "{what}.{key} is {value:?} here but {existing:?} in the release"
                )));
            }
            Some(_) => {}
            None => {
                mine.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(())
}

/// `ns :: feature :: value` lines, as PEP 825 writes properties (`(none)` for the null variant).
pub fn describe(properties: &Properties) -> String {
    let all: Vec<String> = properties
        .iter()
        .flat_map(|(ns, features)| {
            features.iter().flat_map(move |(f, values)| values.iter().map(move |v| format!("{ns} :: {f} :: {v}")))
        })
        .collect();
    if all.is_empty() { "(no properties)".into() } else { format!("[{}]", all.join(", ")) }
}

fn validate_variant(label: &str, properties: &Properties, namespaces: &BTreeSet<&String>) -> Result<(), VariantError> {
    if !is_variant_label(label) {
        return Err(invalid(format!("variant label {label:?} is not 1-16 characters of 0-9, a-z, _ and .")));
    }
    if (label == NULL_VARIANT_LABEL) != properties.is_empty() {
        return Err(invalid(format!(
            "the label {NULL_VARIANT_LABEL:?} is reserved for, and required by, the variant with no properties ({label:?} has {})",
            describe(properties)
        )));
    }
    for (namespace, features) in properties {
        if !namespaces.contains(namespace) {
            return Err(invalid(format!(
                "variant {label:?} uses namespace {namespace:?}, which default-priorities.namespace does not list"
            )));
        }
        if !is_name(namespace) || features.is_empty() {
            return Err(invalid(format!("variant {label:?}: namespace {namespace:?} is invalid or empty")));
        }
        for (feature, values) in features {
            if !is_name(feature) || values.is_empty() || values.iter().any(|v| !is_value(v)) {
                return Err(invalid(format!(
                    "variant {label:?}: {namespace} :: {feature} needs one or more values of 0-9, a-z, _ and ., has {values:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Merge the variant metadata of one release's wheels (in the order given) into its
/// index-level metadata; `None` when none of them is a variant wheel.
pub fn merge_release<'a>(
    wheels: impl IntoIterator<Item = &'a VariantMetadata>,
) -> Result<Option<VariantMetadata>, VariantError> {
    let mut merged: Option<VariantMetadata> = None;
    for metadata in wheels {
        match &mut merged {
            Some(m) => m.merge(metadata)?,
            None => merged = Some(metadata.clone()),
        }
    }
    Ok(merged)
}

/// A wheel's variant metadata in the successor format, one `amd :: gfx_arch` property per
/// entry of `arch` (none: the null variant), for tests of the renderer and the plan.
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used)]
pub fn test_variant(label: &str, arch: &[&str]) -> Box<VariantMetadata> {
    Box::new(VariantMetadata::parse_wheel(providers_format(label, arch).as_bytes(), label).unwrap())
}

/// A variant wheel's `variant.json` in the providers format (tests).
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used)]
fn providers_format(label: &str, arch: &[&str]) -> String {
    const SCHEMA: &str = "https://variants-schema.wheelnext.dev/v0.2.0.json";
    let props = if arch.is_empty() {
        "{}".to_owned()
    } else {
        format!(r#"{{"amd": {{"gfx_arch": {}}}}}"#, serde_json::to_string(arch).unwrap())
    };
    format!(
        r#"{{"$schema": "{SCHEMA}", "default-priorities": {{"namespace": ["amd"]}},
           "providers": {{"amd": {{"requires": ["amd-variant-provider"], "optional": true}}}},
           "variants": {{"{label}": {props}}}}}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = "https://variants-schema.wheelnext.dev/v0.2.0.json";

    #[test]
    fn wheels_are_validated_against_their_label() {
        let ok = VariantMetadata::parse_wheel(providers_format("gfx942", &["gfx942"]).as_bytes(), "gfx942").unwrap();
        assert_eq!(describe(ok.properties("gfx942").unwrap()), "[amd :: gfx_arch :: gfx942]");
        VariantMetadata::parse_wheel(providers_format("null", &[]).as_bytes(), "null").unwrap();
        let err =
            |json: String, label: &str| VariantMetadata::parse_wheel(json.as_bytes(), label).unwrap_err().to_string();
        insta::assert_snapshot!(err(providers_format("gfx942", &["gfx942"]), "gfx90a"), @r#"variant.json: variants must hold exactly the filename's label "gfx90a"; it holds ["gfx942"]"#);
        insta::assert_snapshot!(err(providers_format("null", &["gfx942"]), "null"), @r#"variant.json: the label "null" is reserved for, and required by, the variant with no properties ("null" has [amd :: gfx_arch :: gfx942])"#);
        insta::assert_snapshot!(err(providers_format("gfx942", &["GFX942"]), "gfx942"), @r#"variant.json: variant "gfx942": amd :: gfx_arch needs one or more values of 0-9, a-z, _ and ., has ["GFX942"]"#);
        insta::assert_snapshot!(err(providers_format("gfx942", &["gfx942"]).replace("\"optional\"", "\"bogus\": 1, \"optional\"").replace("default-priorities", "default-priority"), "gfx942"), @"variant.json is not valid variant metadata: unknown field `default-priority`, expected one of `$schema`, `default-priorities`, `providers`, `variants` at line 1 column 83");
        let no_provider =
            providers_format("gfx942", &["gfx942"]).replace(r#""amd": {"requires""#, r#""nv": {"requires""#);
        insta::assert_snapshot!(err(no_provider, "gfx942"), @r#"variant.json: providers must name the same namespaces as default-priorities.namespace: {"nv"} vs {"amd"}"#);
        insta::assert_snapshot!(err("[]".into(), "x"), @"variant.json is not valid variant metadata: invalid length 0, expected struct VariantMetadata with 4 elements at line 1 column 2");
    }

    #[test]
    fn pep_825_format_without_providers_is_accepted() {
        let json = format!(
            r#"{{"$schema": "{SCHEMA}", "default-priorities": {{"namespace": ["x86_64", "blas_lapack"],
               "feature": {{"blas_lapack": ["library"]}}, "property": {{"blas_lapack": {{"library": ["mkl", "openblas"]}}}}}},
               "variants": {{"x8664v3_openblas": {{"blas_lapack": {{"library": ["openblas"]}}, "x86_64": {{"level": ["v3"]}}}}}}}}"#
        );
        let m = VariantMetadata::parse_wheel(json.as_bytes(), "x8664v3_openblas").unwrap();
        assert!(m.providers.is_none());
        assert_eq!(m.default_priorities.feature["blas_lapack"], ["library"]);
    }

    #[test]
    fn merging_follows_pep_825() {
        let wheel = |label: &str, arch: &[&str]| {
            VariantMetadata::parse_wheel(providers_format(label, arch).as_bytes(), label).unwrap()
        };
        let (a, b, n) = (wheel("gfx942", &["gfx942"]), wheel("gfx1100", &["gfx1100"]), wheel("null", &[]));
        let merged = merge_release([&a, &b, &n, &a]).unwrap().unwrap();
        assert_eq!(merged.variants.keys().collect::<Vec<_>>(), ["gfx1100", "gfx942", "null"]);
        insta::assert_snapshot!(String::from_utf8(merged.to_json()).unwrap());
        assert_eq!(merge_release([]).unwrap(), None);

        let mut release = merged.clone();
        let other_props = wheel("gfx942", &["gfx942", "gfx950"]);
        insta::assert_snapshot!(release.merge(&other_props).unwrap_err().to_string(), @r#"variant.json disagrees with the release's other variant wheels: label "gfx942" means [amd :: gfx_arch :: gfx942, amd :: gfx_arch :: gfx950] here but [amd :: gfx_arch :: gfx942] in the release"#);
        assert_eq!(release, merged, "a refused merge changes nothing");
        let mut other_provider = wheel("gfx90a", &["gfx90a"]);
        other_provider.providers.as_mut().unwrap().get_mut("amd").unwrap().insert("optional".into(), false.into());
        insta::assert_snapshot!(release.merge(&other_provider).unwrap_err().to_string(), @r#"variant.json disagrees with the release's other variant wheels: providers.amd is {"optional": Bool(false), "requires": Array [String("amd-variant-provider")]} here but {"optional": Bool(true), "requires": Array [String("amd-variant-provider")]} in the release"#);
        let mut reordered = wheel("gfx90a", &["gfx90a"]);
        reordered.default_priorities.namespace = vec!["nv".into()];
        insta::assert_snapshot!(release.merge(&reordered).unwrap_err().to_string(), @r#"variant.json disagrees with the release's other variant wheels: default-priorities.namespace ["nv"] is not compatible with the release's ["amd"] (one must start with the other)"#);
        let mut longer = wheel("gfx90a", &["gfx90a"]);
        longer.default_priorities.namespace.push("x86_64".into());
        longer.providers.as_mut().unwrap().insert("x86_64".into(), serde_json::Map::new());
        release.merge(&longer).unwrap();
        assert_eq!(release.default_priorities.namespace, ["amd", "x86_64"]);
    }
}
