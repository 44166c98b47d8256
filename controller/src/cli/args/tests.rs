use super::file_sd_path;
use std::path::{Path, PathBuf};

#[test]
fn the_file_sd_list_goes_beside_the_status_directory_unless_told() {
    let st = Path::new("/var/lib/gpuplane/status");
    assert_eq!(
        file_sd_path(None, st),
        Some(PathBuf::from("/var/lib/gpuplane/prometheus/servers.json"))
    );
    assert_eq!(
        file_sd_path(None, Path::new("/tmp/t/st")),
        Some(PathBuf::from("/tmp/t/prometheus/servers.json"))
    );
    assert_eq!(
        file_sd_path(Some("/srv/sd.json".into()), st),
        Some(PathBuf::from("/srv/sd.json"))
    );
    assert_eq!(file_sd_path(Some(PathBuf::new()), st), None);
}
