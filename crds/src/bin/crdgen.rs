//! Writes the CRD YAML of every gpuplane resource into `crds/` (or to stdout with `-`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let yaml = gpuplane_crds::crds_yaml()?;
    match std::env::args().nth(1).as_deref() {
        Some("-") => print!("{yaml}"),
        _ => {
            let path =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(gpuplane_crds::CRDS_FILE);
            std::fs::write(&path, yaml)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
