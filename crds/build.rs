//! Reads each kind's `openAPIV3Schema` out of the committed CRD YAML (`gpuplane.dev_crds.yaml`,
//! which `crdgen` writes and a test holds equal to the types) and writes them as one JSON object,
//! kind → schema, for `gpuplane_crds::CRD_SCHEMAS_JSON`. Why: every process that validates
//! manifests needs the schemas; generating them with schemars was a third of a one-shot
//! `gpuplane plan`, and parsing the YAML still a tenth of it — JSON parses in a fraction.

use serde::Deserialize;

fn main() {
    let src = "gpuplane.dev_crds.yaml";
    println!("cargo:rerun-if-changed={src}");
    let yaml = std::fs::read_to_string(src).expect("read gpuplane.dev_crds.yaml");
    let mut schemas = serde_json::Map::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let crd = serde_json::Value::deserialize(doc).expect("a CRD document");
        let kind = crd.pointer("/spec/names/kind").and_then(|k| k.as_str());
        let schema = crd.pointer("/spec/versions/0/schema/openAPIV3Schema");
        if let (Some(kind), Some(schema)) = (kind, schema) {
            schemas.insert(kind.to_string(), schema.clone());
        }
    }
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("crd_schemas.json");
    std::fs::write(out, serde_json::Value::Object(schemas).to_string()).expect("write");
}
