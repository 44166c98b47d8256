//! Writes the CRD YAML of every gpuplane resource into `crds/` and the chart's `crds/` (or to
//! stdout with `-`), and the pages of `docs/` generated from the code (`gpuplane_crds::docs`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let yaml = gpuplane_crds::crds_yaml()?;
    match std::env::args().nth(1).as_deref() {
        Some("-") => print!("{yaml}"),
        _ => {
            // The chart carries a copy (Helm installs CRDs from its own crds/ folder).
            let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            for path in [
                here.join(gpuplane_crds::CRDS_FILE),
                here.join("../charts/gpuplane/crds")
                    .join(gpuplane_crds::CRDS_FILE),
            ] {
                std::fs::write(&path, &yaml)?;
                eprintln!("wrote {}", path.display());
            }
            let root = here.join("..");
            for (page, text) in [
                (
                    gpuplane_crds::docs::TROUBLESHOOTING,
                    gpuplane_crds::docs::troubleshooting(),
                ),
                (
                    gpuplane_crds::docs::API_REFERENCE,
                    gpuplane_crds::docs::api_reference(),
                ),
            ] {
                std::fs::write(root.join(page), text)?;
                eprintln!("wrote {page}");
            }
        }
    }
    Ok(())
}
