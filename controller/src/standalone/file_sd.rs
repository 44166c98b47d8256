//! The servers for Prometheus's `file_sd_configs`: the JSON of `/sd/servers` (`discovery/`) as
//! a file, replaced atomically after each pass through the one writer (`crate::atomic_file`:
//! Prometheus, which re-reads the file when it changes, never sees half a list, and a link
//! planted in the directory is replaced, never written through). The agent refuses to start
//! when someone other than root can write the directory (`super::check_dirs`).

use std::path::Path;

/// Replaces `path` with `json`; a failure is logged (the listing is for monitoring: it never
/// stops a pass).
pub fn write(path: &Path, json: &str) {
    if path.file_name().is_none() {
        tracing::warn!("--file-sd {}: not a file path", path.display());
        return;
    }
    super::write_or_log(path, json);
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
