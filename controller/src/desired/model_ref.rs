//! What a model reference in a spec may be: a local directory or a Hugging Face repo id. Used
//! by the server rules (`spec.model.path`, the draft model) and by the tenancy rules (an
//! admin's allowed model roots), so it lives apart from both.

/// Longest model path or repo id accepted (Linux's `PATH_MAX`).
const MAX_MODEL_PATH: usize = 4096;

/// A model is a local directory (absolute, normalized, no control characters) or a Hugging
/// Face repo id (`org/name`, letters, digits, `-_.`).
pub(super) fn check(p: &str) -> Result<(), String> {
    if p.len() > MAX_MODEL_PATH {
        return Err(format!("is {} bytes; at most {MAX_MODEL_PATH}", p.len()));
    }
    if p.chars().any(char::is_control) {
        return Err(format!("{p:?} contains a control character"));
    }
    if p.starts_with('/') {
        if p.split('/').any(|seg| seg == "..") {
            return Err(format!("{p:?} contains '..'; give the directory itself"));
        }
        return Ok(());
    }
    let repo_part = |x: &str| {
        !x.is_empty()
            && !x.starts_with('.')
            && x.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match p.split_once('/') {
        Some((org, name)) if repo_part(org) && repo_part(name) => Ok(()),
        _ => Err(format!(
            "{p:?} is neither an absolute path to a model directory nor a Hugging Face repo id (org/name)"
        )),
    }
}
