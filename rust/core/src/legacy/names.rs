//! ORT 1.15's checkpoint folders: which file holds what ([`classify_legacy_file`]) and the names
//! of an optimizer group's two properties.

use crate::{Error, Result};

/// The group property holding the optimizer's initial learning rate (a float).
pub const LEGACY_LR_PROPERTY: &str = "builtin.initial_learning_rate";
/// The group property holding the optimizer's step count (an int64).
pub const LEGACY_STEP_PROPERTY: &str = "builtin.step";

/// What a file of an ORT 1.15 checkpoint folder holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyFile {
    /// Trainable parameters (a name starting with `paramtrain`).
    Trainable,
    /// Frozen parameters (`paramfrozen...`).
    Frozen,
    /// Momentum `momentum` of every parameter of optimizer group `group`, each tensor named after
    /// its parameter (`optim_<group>_<momentum>_tensors.pbseq`).
    Momentum {
        /// The optimizer group's name.
        group: String,
        /// The momentum's name (e.g. `momentum0`).
        momentum: String,
    },
    /// The step and initial learning rate of optimizer group `group`
    /// (`optim_<group>_properties.pbseq`).
    GroupProperties {
        /// The optimizer group's name.
        group: String,
    },
    /// User properties (`custom...`).
    CustomProperties,
}

/// Classifies a directory entry of an ORT 1.15 checkpoint folder by its name, as ORT 1.15 does:
/// hidden entries and names with none of the prefixes are not part of the checkpoint (`None`).
/// ORT matches `paramtrain`, `paramfrozen` and `custom` as prefixes. It splits `optim` names on
/// `_`, so group and momentum names cannot contain `_`; any other `optim` name is an error
/// ([`Error::BadLegacyFileName`]), as in ORT ("Unexpected file extension"). Subdirectories are
/// skipped by the caller.
pub fn classify_legacy_file(name: &str) -> Result<Option<LegacyFile>> {
    if name.starts_with('.') {
        return Ok(None);
    }
    if name.starts_with("paramtrain") {
        return Ok(Some(LegacyFile::Trainable));
    }
    if name.starts_with("paramfrozen") {
        return Ok(Some(LegacyFile::Frozen));
    }
    if name.starts_with("custom") {
        return Ok(Some(LegacyFile::CustomProperties));
    }
    if !name.starts_with("optim") {
        return Ok(None);
    }
    let part = |s: &str| !s.is_empty() && !s.contains('_');
    let middle = name.strip_prefix("optim_");
    if let Some(m) = middle.and_then(|m| m.strip_suffix("_tensors.pbseq")) {
        if let Some((group, momentum)) = m.split_once('_') {
            if part(group) && part(momentum) {
                return Ok(Some(LegacyFile::Momentum {
                    group: group.to_owned(),
                    momentum: momentum.to_owned(),
                }));
            }
        }
    } else if let Some(group) = middle.and_then(|m| m.strip_suffix("_properties.pbseq")) {
        if part(group) {
            return Ok(Some(LegacyFile::GroupProperties { group: group.to_owned() }));
        }
    }
    Err(Error::BadLegacyFileName { name: name.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_file_names_as_ort_does() {
        use LegacyFile::*;
        let ok = |n: &str| classify_legacy_file(n).unwrap();
        assert_eq!(ok("paramtrain_tensors.pbseq"), Some(Trainable));
        assert_eq!(ok("paramtrain_other.bin"), Some(Trainable)); // a prefix, as in ORT
        assert_eq!(ok("paramfrozen_tensors.pbseq"), Some(Frozen));
        assert_eq!(ok("custom_properties.pbseq"), Some(CustomProperties));
        assert_eq!(
            ok("optim_group0_momentum1_tensors.pbseq"),
            Some(Momentum { group: "group0".into(), momentum: "momentum1".into() })
        );
        assert_eq!(ok("optim_group0_properties.pbseq"), Some(GroupProperties { group: "group0".into() }));
        assert_eq!(ok(".paramtrain_tensors.pbseq"), None);
        assert_eq!(ok("README.md"), None);
        for bad in [
            "optim_x.pbseq",
            "optim_a_b_c_tensors.pbseq",
            "optim__m_tensors.pbseq",
            "optim_g_x_properties.pbseq",
            "optimizer_group0_properties.pbseq",
            "optim_g_m_tensors.pbseq.bak",
        ] {
            assert!(matches!(classify_legacy_file(bad), Err(Error::BadLegacyFileName { .. })), "{bad}");
        }
    }
}
