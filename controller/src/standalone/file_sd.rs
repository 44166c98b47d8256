//! The servers for Prometheus's `file_sd_configs`: the JSON of `/sd/servers` (`discovery/`) as
//! a file, replaced atomically after each pass (temp file + rename in the same directory:
//! Prometheus, which re-reads the file when it changes, never sees half a list).

use std::path::Path;

/// Replaces `path` with `json`; a failure is logged (the listing is for monitoring: it never
/// stops a pass).
pub fn write(path: &Path, json: &str) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        tracing::warn!("--file-sd {}: not a file path", path.display());
        return;
    };
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let r = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, json))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_list_is_replaced_whole_and_no_temp_file_is_left() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("prometheus/servers.json");
        super::write(&p, "[{\"targets\":[\"10.0.0.5:30000\"],\"labels\":{}}]");
        super::write(&p, "[]");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "[]");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["servers.json"]);
    }
}
