//! The few core metadata fields the indexer needs, read from METADATA / PKG-INFO.

/// Fields of a core metadata file (the email-header format of the packaging spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMetadata {
    pub name: String,
    pub version: String,
    pub requires_python: Option<String>,
}

impl CoreMetadata {
    /// The first of Name and Version that does not name `name` and `version` (a distribution's
    /// filename): `(field, in the metadata, in the filename)`.
    pub fn disagreement(
        &self,
        name: &quarry_packaging::PackageName,
        version: &quarry_packaging::Version,
    ) -> Option<(&'static str, String, String)> {
        if quarry_packaging::PackageName::new(&self.name).ok().as_ref() != Some(name) {
            return Some(("Name", self.name.clone(), name.to_string()));
        }
        if self.version.parse::<quarry_packaging::Version>().ok().as_ref() != Some(version) {
            return Some(("Version", self.version.clone(), version.to_string()));
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("core metadata is not UTF-8")]
    NotUtf8,
    #[error("core metadata has no {0} field")]
    Missing(&'static str),
}

impl CoreMetadata {
    pub fn parse(raw: &[u8]) -> Result<Self, MetadataError> {
        let text = std::str::from_utf8(raw).map_err(|_| MetadataError::NotUtf8)?;
        let (mut name, mut version, mut requires_python) = (None, None, None);
        for line in text.lines() {
            if line.is_empty() {
                break; // headers end; the description body follows
            }
            let Some((field, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match field.to_ascii_lowercase().as_str() {
                "name" => name = name.or(Some(value.to_owned())),
                "version" => version = version.or(Some(value.to_owned())),
                "requires-python" => requires_python = requires_python.or(Some(value.to_owned())),
                _ => {}
            }
        }
        Ok(Self {
            name: name.filter(|n| !n.is_empty()).ok_or(MetadataError::Missing("Name"))?,
            version: version.filter(|v| !v.is_empty()).ok_or(MetadataError::Missing("Version"))?,
            requires_python: requires_python.filter(|r| !r.is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_headers_only() {
        let m = CoreMetadata::parse(
            b"Metadata-Version: 2.1\nName: Foo.Bar\nVersion: 1.0\nRequires-Python: >=3.8, <4\n\nName: not-this\n",
        )
        .unwrap();
        assert_eq!(m.name, "Foo.Bar");
        assert_eq!(m.version, "1.0");
        assert_eq!(m.requires_python.as_deref(), Some(">=3.8, <4"));
        assert_eq!(CoreMetadata::parse(b"Version: 1\n").unwrap_err(), MetadataError::Missing("Name"));
        assert_eq!(CoreMetadata::parse(b"\xff\xfe").unwrap_err(), MetadataError::NotUtf8);
    }
}
