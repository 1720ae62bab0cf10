//! The configured layout (`quarry.toml`): which prefixes are pip, apt or dnf roots beyond a
//! run's own, with each root's options. One table, read once per process
//! ([`load`]) by the CLI and the Lambda and carried from there as a value (an `Indexer`'s, the
//! server's state's, the Lambda handler's); [`Layout`]'s methods answer every
//! question about it. The default is TheRock's run layout alone, exactly as before.
//!
//! ```toml
//! [layout]
//! runs = true                  # run prefixes ({run}-{platform}/python/, …); default true
//! preset = "therock-release"   # TheRock's release roots (v2/{family}/, v3/packages/…, python-deps/)
//!                              # or "therock-v5": v5/rocm/{product}/{whl,whl-next,packages,tarball}/
//!
//! [[layout.root]]
//! prefix = "nightly/{family}/" # `{name}` matches one segment; literal segments match exactly
//! kind = "pip"                 # pip, apt, dnf or tarball (release tarballs with an index page)
//! find_links = true            # the root's find-links index.html (default false; run roots: on)
//! structured = false           # pip: files in project directories, the root its own simple index
//! keep_days = 30               # retention, carried for the retention code
//! keep_versions = 5
//! view = "family"              # a per-family view: lists `generic` too
//! generic = "nightly/generic/"
//! compose_with = ["python-deps/"] # roots installed together with this one (`quarry mirror`)
//! ```
//!
//! The preset's rules come before the table's own, and the first rule a prefix matches wins
//! ([`Layout::rule_for`]); a prefix no rule matches is a run's root only while `runs` is on. A
//! pattern matches a prefix with as many segments: a literal segment exactly, a `{x}` placeholder
//! one non-empty segment not starting with `.` ([`RootRule::matches`]). [`Layout::parse`]
//! refuses, naming the line, a pattern (`prefix`, `generic` or a `compose_with` entry) with an
//! empty, `.` or `..` segment, a leading `.quarry` segment (the store's own area), a backslash or
//! control character, or a literal segment that is a generated name or a file's name
//! ([`crate::reserved_directory`]); unknown keys, kinds and views too.
//! `compose_with` names the roots composed with this one (one origin per project): `quarry
//! mirror`'s default `--compose-with` is every root the store holds that one of these patterns
//! configures. [`ChannelRoots`] is the one place `quarry promote` and the GPU page learn where a
//! channel's pip, apt and dnf roots lie; [`ReleaseRoots`] where a `--release-type` promotion
//! places each kind in TheRock's v5 layout (the `therock-v5` preset).

use serde::Deserialize;

use super::UploadKind;

/// What a configured root serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RootKind {
    Pip,
    Apt,
    Dnf,
    /// Release tarballs (`*.tar.gz`) directly in the directory, with an index page listing
    /// each one's name, size, sha256 and time: no package repo.
    Tarball,
}

impl RootKind {
    /// `pip`, `apt`, `dnf` or `tarball` (as configured).
    pub fn label(self) -> &'static str {
        match self {
            Self::Pip => "pip",
            Self::Apt => "apt",
            Self::Dnf => "dnf",
            Self::Tarball => "tarball",
        }
    }
}

/// One configured root: a prefix pattern and its options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RootRule {
    /// `/`-separated segments, each literal or a `{name}` placeholder matching one segment.
    pub prefix: String,
    pub kind: RootKind,
    /// Whether the root gets a find-links `index.html` (pip roots). Off unless set: a channel
    /// root outlives runs and grows to 100,000 files, and this page is the one output that
    /// grows with the root (every event rewrites it whole). Run roots, which match no rule,
    /// keep theirs.
    #[serde(default)]
    pub find_links: bool,
    /// A structured pip root (TheRock's v5 layout): each file in its project's directory
    /// (`{root}/{pep503-name}/{file}`), whose `index.html` lists the project's files; the
    /// root's `index.html` lists the projects. The root is itself the simple index.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub structured: bool,
    /// Retention: days a version is kept (none: for ever).
    #[serde(default)]
    pub keep_days: Option<u32>,
    /// Retention: newest versions kept per project (none: all).
    #[serde(default)]
    pub keep_versions: Option<u32>,
    /// View membership: `family` for a per-family pip index that also lists `generic`.
    #[serde(default)]
    pub view: Option<String>,
    /// The root whose files a per-family view lists too.
    #[serde(default)]
    pub generic: Option<String>,
    /// Root patterns composed with this root (one origin per project): `quarry mirror`'s
    /// default `--compose-with`, each pattern standing for the roots the store holds that it
    /// configures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compose_with: Vec<String>,
}

fn yes() -> bool {
    true
}

/// The whole configured layout.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// Whether run prefixes (`{run}-{platform}/…`) have their roots and listings.
    #[serde(default = "yes")]
    pub runs: bool,
    /// A named preset whose roots come before the table's own.
    #[serde(default)]
    pub preset: Option<String>,
    /// The configured roots, first match wins.
    #[serde(default, rename = "root")]
    pub roots: Vec<RootRule>,
}

impl Default for Layout {
    /// TheRock's run layout and nothing else: what Quarry always did.
    fn default() -> Self {
        Self { runs: true, preset: None, roots: Vec::new() }
    }
}

/// A `quarry.toml`: its `[layout]` table.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    layout: Option<Layout>,
}

/// The names [`Layout::preset`] accepts.
pub const PRESETS: &[&str] = &["therock-release", "therock-v5"];

/// TheRock's release layout: nightly/staging pip roots per family, a deb repo, rpm repos per
/// architecture, the `python-deps` base index.
pub const THEROCK_RELEASE: &str = r#"
[[layout.root]]
prefix = "v2/{family}/"
kind = "pip"
view = "family"
generic = "v2/generic/"

[[layout.root]]
prefix = "v2-staging/{family}/"
kind = "pip"
view = "family"
generic = "v2-staging/generic/"

[[layout.root]]
prefix = "v3/packages/deb/"
kind = "apt"

[[layout.root]]
prefix = "v3/packages/rpm/{arch}/"
kind = "dnf"

[[layout.root]]
prefix = "python-deps/"
kind = "pip"
compose_with = ["v2/{family}/", "v2-staging/{family}/"]
"#;

/// TheRock's v5 release layout (`publish_rocm_to_release_buckets.py`), one product per
/// bucket (`therock-repo-amd-{stream}-{product}`): structured pip roots `whl/` (per-family
/// builds) and `whl-next/` (kpack builds), apt and dnf repos under `packages/{deb|rpm}/`
/// (prerelease) or a dated `packages/{deb|rpm}/{YYYYMMDD}-{run_id}/` per promotion (dev,
/// nightly), `-asan` twins for ASAN builds, and the tarball directories ([`ReleaseRoots`]).
pub const THEROCK_V5: &str = r#"
[[layout.root]]
prefix = "v5/rocm/{product}/whl/"
kind = "pip"
structured = true

[[layout.root]]
prefix = "v5/rocm/{product}/whl-next/"
kind = "pip"
structured = true

[[layout.root]]
prefix = "v5/rocm/{product}/packages/deb/"
kind = "apt"

[[layout.root]]
prefix = "v5/rocm/{product}/packages/deb/{repo}/"
kind = "apt"

[[layout.root]]
prefix = "v5/rocm/{product}/packages/rpm/{arch}/"
kind = "dnf"

[[layout.root]]
prefix = "v5/rocm/{product}/packages/rpm/{repo}/{arch}/"
kind = "dnf"

[[layout.root]]
prefix = "v5/rocm/{product}/packages-asan/deb/"
kind = "apt"

[[layout.root]]
prefix = "v5/rocm/{product}/packages-asan/deb/{repo}/"
kind = "apt"

[[layout.root]]
prefix = "v5/rocm/{product}/packages-asan/rpm/{arch}/"
kind = "dnf"

[[layout.root]]
prefix = "v5/rocm/{product}/packages-asan/rpm/{repo}/{arch}/"
kind = "dnf"

[[layout.root]]
prefix = "v5/rocm/{product}/tarball/"
kind = "tarball"

[[layout.root]]
prefix = "v5/rocm/{product}/tarball-asan/"
kind = "tarball"
"#;

/// A bad layout file, naming the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("layout config{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct ConfigError {
    pub line: Option<usize>,
    pub message: String,
}

/// The 1-based line of a byte offset in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

/// A prefix pattern: not empty, relative, `/`-separated good segments.
fn pattern_ok(pattern: &str) -> bool {
    let trimmed = pattern.trim_end_matches('/');
    !trimmed.is_empty() && !pattern.starts_with('/') && trimmed.split('/').all(segment_ok)
}

/// One segment of a prefix pattern.
fn segment_ok(segment: &str) -> bool {
    let placeholder = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
    match placeholder {
        Some(name) => !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        None => !segment.is_empty() && segment != "." && segment != ".." && !segment.contains(['{', '}']),
    }
}

impl RootRule {
    /// Whether `prefix` (with or without its trailing `/`) is this rule's root, with the
    /// values of the placeholders (`family` → `gfx94X-dcgpu`).
    pub fn matches<'a>(&'a self, prefix: &'a str) -> Option<Vec<(&'a str, &'a str)>> {
        let pattern = self.prefix.trim_end_matches('/').split('/');
        let segments: Vec<&str> = prefix.trim_end_matches('/').split('/').collect();
        let pattern: Vec<&str> = pattern.collect();
        if pattern.len() != segments.len() {
            return None;
        }
        let mut values = Vec::new();
        for (p, s) in pattern.iter().zip(&segments) {
            match p.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
                Some(name) if !s.is_empty() && !s.starts_with('.') => values.push((name, *s)),
                Some(_) => return None,
                None if p == s => {}
                None => return None,
            }
        }
        Some(values)
    }

    /// The prefix the pattern gives with `values` filled in, ending in `/`; `None` if a
    /// placeholder has no value.
    pub fn fill(&self, values: &[(&str, &str)]) -> Option<String> {
        let mut out = String::new();
        for p in self.prefix.trim_end_matches('/').split('/') {
            let segment = match p.strip_prefix('{').and_then(|n| n.strip_suffix('}')) {
                Some(name) => values.iter().find(|(n, _)| *n == name)?.1,
                None => p,
            };
            out.push_str(segment);
            out.push('/');
        }
        Some(out)
    }
}

impl Layout {
    /// The run layout under this configuration: TheRock's ([`super::THEROCK`]).
    pub fn run(&self) -> &'static super::RunLayout {
        &super::THEROCK
    }

    /// Whether a directory (a `/`-separated prefix) gets a run listing: run prefixes are laid
    /// out (`runs`) and the run layout lists it ([`super::RunLayout::is_listed`]).
    pub fn is_listed(&self, prefix: &str) -> bool {
        self.runs && self.run().is_listed(prefix)
    }

    /// A layout from `quarry.toml` text, the preset's roots first; errors name the line.
    /// Other tables and keys of the file (`quarry serve`'s) are not this module's.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError {
            line: e.span().map(|s| line_of(text, s.start)),
            message: e.message().to_owned(),
        })?;
        let mut layout = file.layout.unwrap_or_default();
        for (i, rule) in layout.roots.iter().enumerate() {
            if let Err(message) = rule.check() {
                let line = rule_line(text, i);
                return Err(ConfigError { line, message });
            }
        }
        if let Some(name) = &layout.preset {
            let preset = Self::preset(name).ok_or_else(|| ConfigError {
                line: text.lines().position(|l| l.trim_start().starts_with("preset")).map(|i| i + 1),
                message: format!("unknown preset {name:?}: expected one of {}", PRESETS.join(", ")),
            })?;
            let own = std::mem::take(&mut layout.roots);
            layout.roots = preset.roots.into_iter().chain(own).collect();
        }
        Ok(layout)
    }

    /// A named preset's layout (its roots, with the run layout).
    pub fn preset(name: &str) -> Option<Self> {
        let text = match name {
            "therock-release" => THEROCK_RELEASE,
            "therock-v5" => THEROCK_V5,
            _ => return None,
        };
        let file: File = toml::from_str(text).expect("the preset parses");
        let mut layout = file.layout.expect("the preset has a layout");
        layout.preset = Some(name.to_owned());
        Some(layout)
    }

    /// The first configured root rule `prefix` matches.
    pub fn rule_for(&self, prefix: &str) -> Option<&RootRule> {
        self.roots.iter().find(|rule| rule.matches(prefix).is_some())
    }
}

/// Why a pattern's literal segment cannot name a root's directory, if it cannot: the store's
/// reserved `.quarry/` area, a name Quarry generates (`simple`, `index.html`, …) or a file's
/// name (`x.whl`), a backslash or control character.
fn reserved_in(pattern: &str) -> Option<String> {
    let trimmed = pattern.trim_end_matches('/');
    let literals = trimmed.split('/').enumerate().filter(|(_, s)| !s.starts_with('{'));
    for (i, segment) in literals {
        if i == 0 && segment == ".quarry" {
            return Some(format!("{segment:?} is the store's reserved area"));
        }
        if segment.contains('\\') || segment.chars().any(char::is_control) {
            return Some(format!("{segment:?} holds a backslash or a control character"));
        }
        if let Some(why) = super::reserved_directory(segment) {
            return Some(format!("{segment:?} is {}", why.describe()));
        }
    }
    None
}

impl RootRule {
    fn check(&self) -> Result<(), String> {
        if !pattern_ok(&self.prefix) {
            return Err(format!(
                "bad root prefix {:?}: '/'-separated segments, each a name or a {{placeholder}}",
                self.prefix
            ));
        }
        if let Some(why) = reserved_in(&self.prefix) {
            return Err(format!("bad root prefix {:?}: {why}", self.prefix));
        }
        if let Some(bad) = self.compose_with.iter().find(|p| !pattern_ok(p)) {
            return Err(format!(
                "bad compose_with pattern {bad:?}: '/'-separated segments, each a name or a {{placeholder}}"
            ));
        }
        if let Some((bad, why)) = self.compose_with.iter().find_map(|p| reserved_in(p).map(|w| (p, w))) {
            return Err(format!("bad compose_with pattern {bad:?}: {why}"));
        }
        if let Some(generic) = &self.generic
            && let Some(why) =
                reserved_in(generic).or_else(|| (!pattern_ok(generic)).then(|| "not a prefix".to_owned()))
        {
            return Err(format!("bad generic root {generic:?}: {why}"));
        }
        if self.view.as_deref().is_some_and(|v| v != "family") {
            return Err(format!("unknown view {:?}: expected \"family\"", self.view.as_deref().unwrap_or_default()));
        }
        if self.kind != RootKind::Pip && (self.view.is_some() || self.generic.is_some() || self.structured) {
            return Err("views, generic roots and structured are pip roots' options".to_owned());
        }
        if self.structured && (self.find_links || self.view.is_some() || self.generic.is_some()) {
            return Err(
                "a structured pip root is its own simple index: no find_links page, view or generic root".to_owned()
            );
        }
        Ok(())
    }
}

/// The line of the `i`-th `[[layout.root]]` table.
fn rule_line(text: &str, i: usize) -> Option<usize> {
    text.lines().enumerate().filter(|(_, l)| l.trim() == "[[layout.root]]").nth(i).map(|(n, _)| n + 1)
}

/// Reads a layout file: `path` given, it must exist; otherwise `./quarry.toml` if present, else
/// the default (runs only). Returns the layout and the file it came from, for logs. The caller
/// carries the layout to what needs it (an `Indexer`, the server's state, the Lambda's handler):
/// there is no process-wide layout.
pub fn load(path: Option<&std::path::Path>) -> Result<(Layout, Option<std::path::PathBuf>), ConfigError> {
    let default = std::path::Path::new("quarry.toml");
    let path = match path {
        Some(p) => p,
        None if default.is_file() => default,
        None => return Ok((Layout::default(), None)),
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError { line: None, message: format!("reading {}: {e}", path.display()) })?;
    let layout = Layout::parse(&text)
        .map_err(|e| ConfigError { line: e.line, message: format!("{}: {}", path.display(), e.message) })?;
    Ok((layout, Some(path.to_owned())))
}

/// Where a channel's roots lie: the configured layout's roots under the channel prefix
/// (`[layout]`: a pip root with a `{family}` placeholder, an apt root, a dnf root with an
/// `{arch}` placeholder), else a run's layout below it (`{channel}/python/{family}/`,
/// `{channel}/packages/deb/`, `{channel}/packages/rpm/{arch}/`).
#[derive(Debug, Clone)]
pub struct ChannelRoots<'a> {
    name: String,
    rules: Vec<&'a RootRule>,
}

impl<'a> ChannelRoots<'a> {
    /// The roots of channel `name` under `layout`.
    pub fn new(name: &str, layout: &'a Layout) -> Self {
        let name = name.trim_end_matches('/').to_owned();
        let rules = layout.roots.iter().filter(|r| r.prefix.starts_with(&format!("{name}/"))).collect();
        Self { name, rules }
    }

    /// The channel's name, without a trailing `/`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn rule(&self, kind: RootKind, placeholder: &str) -> Option<&'a RootRule> {
        self.rules
            .iter()
            .copied()
            .find(|r| r.kind == kind && (placeholder.is_empty() || r.prefix.contains(placeholder)))
    }

    /// The pip root of `family` (`None`: the run has no family wheels).
    pub fn pip(&self, family: Option<&str>) -> String {
        let python = super::THEROCK.root_dir(UploadKind::Python);
        match (family, self.rule(RootKind::Pip, "{family}")) {
            (Some(f), Some(rule)) => rule.fill(&[("family", f)]).unwrap_or_default(),
            (Some(f), None) => format!("{}/{python}{f}/", self.name),
            (None, _) => format!("{}/{python}", self.name),
        }
    }

    /// The root generic wheels are promoted into once when the channel's family roots are
    /// per-family views (`view = "family"`, `generic = …`), listing them from there; `None`:
    /// each family root holds its own copy.
    pub fn generic(&self) -> Option<String> {
        let rule = self.rule(RootKind::Pip, "{family}").filter(|r| r.view.as_deref() == Some("family"))?;
        rule.generic.as_deref().map(|g| format!("{}/", g.trim_end_matches('/')))
    }

    /// The apt root.
    pub fn deb(&self) -> String {
        let rule = self.rule(RootKind::Apt, "");
        let run_like = || format!("{}/{}", self.name, super::THEROCK.root_dir(UploadKind::Deb));
        rule.map_or_else(run_like, |r| format!("{}/", r.prefix.trim_end_matches('/')))
    }

    /// The dnf root of `arch`.
    pub fn rpm(&self, arch: &str) -> String {
        let filled = self.rule(RootKind::Dnf, "{arch}").and_then(|r| r.fill(&[("arch", arch)]));
        filled.unwrap_or_else(|| format!("{}/{}", self.name, super::THEROCK.rpm_root_dir(arch)))
    }
}

/// TheRock's release types (`publish_rocm_to_release_buckets.py --release-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReleaseType {
    Dev,
    DevBkc,
    Nightly,
    NightlyBkc,
    Prerelease,
}

impl ReleaseType {
    /// Every type, in TheRock's order.
    pub const ALL: [Self; 5] = [Self::Dev, Self::DevBkc, Self::Nightly, Self::NightlyBkc, Self::Prerelease];

    /// `dev`, `dev-bkc`, `nightly`, `nightly-bkc` or `prerelease`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Dev => "dev",
            Self::DevBkc => "dev-bkc",
            Self::Nightly => "nightly",
            Self::NightlyBkc => "nightly-bkc",
            Self::Prerelease => "prerelease",
        }
    }

    /// A type by its label.
    pub fn parse(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.label() == label)
    }

    /// The stream its product bucket is named by: `dev`, `nightly`, `rc` (prerelease) or `bkc`
    /// (both BKC types).
    pub fn stream(self) -> &'static str {
        match self {
            Self::Dev => "dev",
            Self::Nightly => "nightly",
            Self::Prerelease => "rc",
            Self::DevBkc | Self::NightlyBkc => "bkc",
        }
    }

    /// The product bucket TheRock publishes `product` (`core`, `pytorch`, `jax`) of this type
    /// to: `therock-repo-amd-{stream}-{product}`.
    pub fn bucket(self, product: &str) -> String {
        format!("therock-repo-amd-{}-{product}", self.stream())
    }

    /// The bucket holding this type's runs (`therock-{dev|nightly|prerelease}-artifacts`).
    pub fn artifact_bucket(self) -> &'static str {
        super::artifact_bucket(self.label(), "", false).unwrap_or("therock-dev-artifacts")
    }

    /// Whether each promotion's native packages get a repo of their own, named by date and
    /// run (`{YYYYMMDD}-{run_id}/`): every type but prerelease, which publishes into one repo.
    pub fn dated(self) -> bool {
        self != Self::Prerelease
    }
}

/// A release's build variant (`--build-variant`): ASAN builds go to `-asan` directories and
/// publish no Python packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BuildVariant {
    #[default]
    Release,
    Asan,
}

/// Where a promotion of one run places each kind in TheRock's v5 layout under a product
/// prefix (`v5/rocm/core/`), as `publish_rocm_to_release_buckets.py` does: wheels and sdists
/// in the structured `whl-next/` (a kpack run) or `whl/` (a per-family run), none for ASAN;
/// `.deb`s and `.rpm`s in `packages[-asan]/{deb|rpm}/`, below a `{YYYYMMDD}-{run_id}/` repo of
/// their own unless the type is prerelease; tarballs in `tarball[-asan]/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRoots {
    base: String,
    release_type: ReleaseType,
    variant: BuildVariant,
    repo: String,
}

impl ReleaseRoots {
    /// The roots under `base` (`v5/rocm/{product}`, with or without its `/`) for a promotion
    /// on `date` (the promotion's, UTC) of run `run_id`; an error names a base that is not a
    /// product prefix of the v5 layout.
    pub fn new(
        base: &str,
        release_type: ReleaseType,
        variant: BuildVariant,
        date: jiff::civil::Date,
        run_id: &str,
    ) -> Result<Self, String> {
        let trimmed = base.trim_end_matches('/');
        let product = trimmed.strip_prefix("v5/rocm/").filter(|p| segment_ok(p) && !p.contains('/'));
        if product.is_none_or(|p| p.starts_with('{') || p.starts_with('.')) {
            return Err(format!("{base:?} is not a product prefix of TheRock's v5 layout (v5/rocm/PRODUCT/)"));
        }
        if run_id.is_empty() || !run_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("run id {run_id:?} is not a number"));
        }
        let repo = format!("{}-{run_id}", date.strftime("%Y%m%d"));
        Ok(Self { base: format!("{trimmed}/"), release_type, variant, repo })
    }

    /// The product prefix, ending in `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The product (`core`).
    pub fn product(&self) -> &str {
        self.base.trim_end_matches('/').rsplit('/').next().unwrap_or_default()
    }

    /// The structured pip root of a kpack (`whl-next/`) or per-family (`whl/`) run; `None` for
    /// ASAN builds, which publish no Python packages.
    pub fn pip(&self, kpack: bool) -> Option<String> {
        let index = if kpack { "whl-next" } else { "whl" };
        (self.variant == BuildVariant::Release).then(|| format!("{}{index}/", self.base))
    }

    fn asan(&self) -> &'static str {
        match self.variant {
            BuildVariant::Release => "",
            BuildVariant::Asan => "-asan",
        }
    }

    /// The native repos' directory: `packages[-asan]/{kind}/`, plus the dated repo.
    fn native(&self, kind: &str) -> String {
        let dated = if self.release_type.dated() { format!("{}/", self.repo) } else { String::new() };
        format!("{}packages{}/{kind}/{dated}", self.base, self.asan())
    }

    /// The apt root.
    pub fn deb(&self) -> String {
        self.native("deb")
    }

    /// The dnf root of `arch` (dnf's `baseurl`).
    pub fn rpm(&self, arch: &str) -> String {
        format!("{}{arch}/", self.native("rpm"))
    }

    /// The tarball directory.
    pub fn tarball(&self) -> String {
        format!("{}tarball{}/", self.base, self.asan())
    }

    /// The dated repo's name (`20260501-12345`), whether or not the type uses one.
    pub fn repo(&self) -> &str {
        &self.repo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_runs_only() {
        let layout = Layout::parse("store = \"s3://b/\"\n[limits]\nkeep_alive = true\n").unwrap();
        assert_eq!(layout, Layout::default());
        assert!(layout.runs && layout.roots.is_empty());
    }

    #[test]
    fn the_release_preset_combines_with_runs_and_own_roots() {
        let layout = Layout::parse(
            "[layout]\npreset = \"therock-release\"\n[[layout.root]]\nprefix = \"dev/{family}/\"\nkind = \"pip\"\n",
        )
        .unwrap();
        assert!(layout.runs);
        let kind = |p: &str| layout.rule_for(p).map(|r| r.kind);
        assert_eq!(kind("v2/gfx94X-dcgpu/"), Some(RootKind::Pip));
        assert_eq!(kind("v2-staging/gfx120X-all"), Some(RootKind::Pip));
        assert_eq!(kind("v3/packages/deb/"), Some(RootKind::Apt));
        assert_eq!(kind("v3/packages/rpm/x86_64/"), Some(RootKind::Dnf));
        assert_eq!(kind("python-deps/"), Some(RootKind::Pip));
        assert_eq!(kind("dev/gfx950-dcgpu/"), Some(RootKind::Pip));
        assert_eq!(kind("v2/gfx94X-dcgpu/simple/"), None);
        assert_eq!(kind("v2/"), None);
        assert_eq!(kind("v2/.hidden/"), None);
        let rule = layout.rule_for("v2/gfx94X-dcgpu/").unwrap();
        assert_eq!(rule.matches("v2/gfx94X-dcgpu/"), Some(vec![("family", "gfx94X-dcgpu")]));
        assert_eq!(rule.fill(&[("family", "gfx950-dcgpu")]).as_deref(), Some("v2/gfx950-dcgpu/"));
        assert_eq!(rule.generic.as_deref(), Some("v2/generic/"));
        assert_eq!(rule.view.as_deref(), Some("family"));
        assert_eq!(ChannelRoots::new("v2", &layout).generic().as_deref(), Some("v2/generic/"));
        assert_eq!(ChannelRoots::new("v3", &layout).generic(), None);
        assert_eq!(ChannelRoots::new("dev", &layout).generic(), None, "no view: a copy per family");
    }

    #[test]
    fn the_v5_preset_lays_out_therocks_release_buckets() {
        let layout = Layout::parse("[layout]\npreset = \"therock-v5\"\n").unwrap();
        let rule = |p: &str| layout.rule_for(p).map(|r| (r.kind, r.structured));
        assert_eq!(rule("v5/rocm/core/whl-next/"), Some((RootKind::Pip, true)));
        assert_eq!(rule("v5/rocm/pytorch/whl/"), Some((RootKind::Pip, true)));
        assert_eq!(rule("v5/rocm/core/whl-next/rocm/"), None, "a project directory is no root");
        assert_eq!(rule("v5/rocm/core/packages/deb/20260501-12345/"), Some((RootKind::Apt, false)));
        assert_eq!(rule("v5/rocm/core/packages/deb/"), Some((RootKind::Apt, false)));
        assert_eq!(rule("v5/rocm/core/packages/rpm/20260501-12345/x86_64/"), Some((RootKind::Dnf, false)));
        assert_eq!(rule("v5/rocm/core/packages-asan/rpm/x86_64/"), Some((RootKind::Dnf, false)));
        assert_eq!(rule("v5/rocm/core/tarball/"), Some((RootKind::Tarball, false)));
        assert_eq!(rule("v5/rocm/core/tarball-asan/"), Some((RootKind::Tarball, false)));
        assert!(layout.runs, "runs keep their roots");

        let date = jiff::civil::date(2026, 5, 1);
        let roots = |t, v| ReleaseRoots::new("v5/rocm/core/", t, v, date, "12345").unwrap();
        let dev = roots(ReleaseType::Dev, BuildVariant::Release);
        assert_eq!((dev.base(), dev.product()), ("v5/rocm/core/", "core"));
        assert_eq!(dev.pip(true).as_deref(), Some("v5/rocm/core/whl-next/"));
        assert_eq!(dev.pip(false).as_deref(), Some("v5/rocm/core/whl/"));
        assert_eq!(dev.deb(), "v5/rocm/core/packages/deb/20260501-12345/");
        assert_eq!(dev.rpm("x86_64"), "v5/rocm/core/packages/rpm/20260501-12345/x86_64/");
        assert_eq!(dev.tarball(), "v5/rocm/core/tarball/");
        let pre = roots(ReleaseType::Prerelease, BuildVariant::Release);
        assert_eq!(
            (pre.deb(), pre.rpm("x86_64")),
            ("v5/rocm/core/packages/deb/".into(), "v5/rocm/core/packages/rpm/x86_64/".into())
        );
        let asan = roots(ReleaseType::Nightly, BuildVariant::Asan);
        assert_eq!(asan.pip(true), None, "ASAN publishes no Python");
        assert_eq!(asan.deb(), "v5/rocm/core/packages-asan/deb/20260501-12345/");
        assert_eq!(asan.tarball(), "v5/rocm/core/tarball-asan/");
        let pre_asan = roots(ReleaseType::Prerelease, BuildVariant::Asan);
        assert_eq!(pre_asan.rpm("x86_64"), "v5/rocm/core/packages-asan/rpm/x86_64/");
        for bad in ["v5/rocm/", "v4/rocm/core/", "v5/rocm/a/b/", "v5/rocm/{product}/", "v5/rocm/../"] {
            assert!(ReleaseRoots::new(bad, ReleaseType::Dev, BuildVariant::Release, date, "1").is_err(), "{bad}");
        }
        assert!(ReleaseRoots::new("v5/rocm/core", ReleaseType::Dev, BuildVariant::Release, date, "x1").is_err());

        let buckets: Vec<String> = ReleaseType::ALL.iter().map(|t| t.bucket("core")).collect();
        assert_eq!(
            buckets,
            [
                "therock-repo-amd-dev-core",
                "therock-repo-amd-bkc-core",
                "therock-repo-amd-nightly-core",
                "therock-repo-amd-bkc-core",
                "therock-repo-amd-rc-core"
            ]
        );
        let sources: Vec<&str> = ReleaseType::ALL.iter().map(|t| t.artifact_bucket()).collect();
        assert_eq!(
            sources,
            [
                "therock-dev-artifacts",
                "therock-dev-artifacts",
                "therock-nightly-artifacts",
                "therock-nightly-artifacts",
                "therock-prerelease-artifacts"
            ]
        );
        assert_eq!(ReleaseType::parse("nightly-bkc"), Some(ReleaseType::NightlyBkc));
        assert_eq!(ReleaseType::parse("release"), None);
    }

    #[test]
    fn options_are_carried() {
        let text = "[layout]\nruns = false\n[[layout.root]]\nprefix = \"nightly/{family}\"\nkind = \"pip\"\nfind_links = false\nkeep_days = 30\nkeep_versions = 3\n";
        let layout = Layout::parse(text).unwrap();
        assert!(!layout.runs);
        let rule = &layout.roots[0];
        assert_eq!((rule.find_links, rule.keep_days, rule.keep_versions), (false, Some(30), Some(3)));
    }

    #[test]
    fn bad_configs_name_the_line() {
        let err = |text: &str| Layout::parse(text).unwrap_err().to_string();
        insta::assert_snapshot!(
            [
                err("[layout]\nruns = true\n[[layout.root]]\nprefix = \"x/\"\nkind = \"npm\"\n"),
                err("[[layout.root]]\nprefix = \"x/\"\nkind = \"pip\"\n\n[[layout.root]]\nprefix = \"a//b\"\nkind = \"apt\"\n"),
                err("[layout]\npreset = \"nope\"\n"),
                err("[[layout.root]]\nprefix = \"x/\"\nkind = \"pip\"\nkeep = 3\n"),
                err("[[layout.root]]\nprefix = \"x/{fam\"\nkind = \"pip\"\n"),
                err("[[layout.root]]\nprefix = \"deb/\"\nkind = \"apt\"\nview = \"family\"\n"),
                err("[layout]\nruns = \"yes\"\n"),
                err("[[layout.root]]\nprefix = \"t/\"\nkind = \"tarball\"\nstructured = true\n"),
                err("[[layout.root]]\nprefix = \"w/\"\nkind = \"pip\"\nstructured = true\nfind_links = true\n"),
            ]
            .join("\n")
        );
    }

    #[test]
    fn reserved_and_generated_names_are_refused_naming_the_line() {
        let err = |prefix: &str| {
            let text = format!("[layout]\nruns = true\n\n[[layout.root]]\nprefix = {prefix:?}\nkind = \"pip\"\n");
            Layout::parse(&text).unwrap_err().to_string()
        };
        insta::assert_snapshot!(
            [
                err(".quarry/x/"),
                err("x/\\y/"),
                err("x/{family}/simple/"),
                err("v2/{family}/index.html/"),
                err("v2/Index.HTML/"),
                err("v2/repodata/"),
                err("v2/a.whl/"),
                err("v2/.quarry-index.json/"),
            ]
            .join("\n")
        );
    }
}
