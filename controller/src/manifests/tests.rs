//! Issue 23: the manifest directory is read as the agent's input, not followed anywhere.

use super::*;

const PART: &str = "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata: {name: p}\nspec:\n  nodeName: n\n  slices:\n    - {name: a, gpus: {count: 1}, driver: nvidia}\n";

fn refused(r: Result<Manifests, ManifestError>) -> String {
    match r {
        Err(e @ ManifestError::Refused { .. }) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("read"),
    }
}

#[test]
fn a_link_out_of_the_directory_is_refused_and_one_inside_is_read() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("..data")).unwrap();
    std::fs::write(d.path().join("..data/p.yaml"), PART).unwrap();
    // A ConfigMap volume's shape: the file is a link into ..data/ of the same directory.
    std::os::unix::fs::symlink("..data/p.yaml", d.path().join("p.yaml")).unwrap();
    let m = Manifests::load(d.path()).unwrap();
    assert_eq!(m.partitions.len(), 1);
    // A link to /dev/zero grew the standalone agent to 1.6 GB in 6 s.
    std::os::unix::fs::symlink("/dev/zero", d.path().join("zero.yaml")).unwrap();
    let e = refused(Manifests::load(d.path()));
    assert!(e.contains("zero.yaml") && e.contains("outside"), "{e}");
}

#[test]
fn only_regular_files_of_bounded_size_are_read() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("f.yaml");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = refused(Manifests::load(d.path()));
    assert!(e.contains("not a regular file"), "{e}");
    let e = refused(Manifests::load(Path::new("/dev/zero")));
    assert!(e.contains("not a regular file"), "{e}");
    std::fs::remove_file(&fifo).unwrap();
    let big = format!("{PART}# {}\n", "x".repeat(MANIFEST_MAX as usize));
    std::fs::write(d.path().join("big.yaml"), big).unwrap();
    let e = refused(Manifests::load(d.path()));
    assert!(e.contains("larger than 4 MiB"), "{e}");
}

const POOL: &str = "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuNodePool\nmetadata: {name: fleet}\nspec: {maxUnavailable: \"25%\"}\n";

/// Issue 37: a pool beside its members (a directory as applied to a cluster) made the whole
/// directory unreadable ("kind GpuNodePool is not GpuPartition or InferenceServer"): it is read,
/// its schema checked like the other kinds', and a second definition named.
#[test]
fn a_pool_beside_its_members_is_read_and_schema_checked() {
    let mut m = Manifests::default();
    m.add_text(&format!("{PART}---\n{POOL}"), "dir/all.yaml")
        .unwrap();
    assert_eq!((m.partitions.len(), m.pools.len()), (1, 1));
    assert_eq!(m.pools[0].metadata.name.as_deref(), Some("fleet"));
    let e = m.add_text(POOL, "dir/again.yaml").unwrap_err().to_string();
    assert!(e.contains("GpuNodePool/fleet is defined twice"), "{e}");
    let schema = |text: &str| {
        Manifests::default()
            .add_text(text, "p.yaml")
            .unwrap_err()
            .to_string()
    };
    let e = schema(&POOL.replace("maxUnavailable", "maxUnavailble"));
    assert!(e.contains("spec.maxUnavailble: unknown field"), "{e}");
    let e = schema(&POOL.replace("\"25%\"", "1.5"));
    assert!(
        e.contains("spec.maxUnavailable: 1.5 is neither a whole number nor a string"),
        "{e}"
    );
    // Unset and null are the default (1).
    for spec in [
        "{}",
        "{maxUnavailable: null}",
        "{maxUnavailable: 0, paused: true}",
    ] {
        Manifests::default()
            .add_text(&POOL.replace("{maxUnavailable: \"25%\"}", spec), "p.yaml")
            .unwrap();
    }
    let e = schema("apiVersion: gpuplane.dev/v1alpha1\nkind: ConfigMap\nmetadata: {name: x}\n");
    assert!(
        e.contains("is not one of GpuPartition, InferenceServer, GpuNodePool"),
        "{e}"
    );
}
