use super::*;

#[test]
fn prints_parses_and_orders_as_the_old_text() {
    let p = ResourceKey::partition("kpro6");
    let s = ResourceKey::server_id("default/qwen");
    let pool = ResourceKey::pool("fleet");
    assert_eq!(p.to_string(), "GpuPartition/kpro6");
    assert_eq!(s.to_string(), "InferenceServer/default/qwen");
    assert_eq!(pool.to_string(), "GpuNodePool/fleet");
    assert_eq!(pool, "GpuNodePool/fleet");
    assert_eq!(pool.kind(), "GpuNodePool");
    assert_eq!(s, ResourceKey::server("default", "qwen"));
    for k in [&p, &s, &pool] {
        assert_eq!(k.to_string().parse::<ResourceKey>().unwrap(), *k);
        let json = serde_json::to_string(k).unwrap();
        assert_eq!(json, format!("\"{k}\""));
        assert_eq!(serde_json::from_str::<ResourceKey>(&json).unwrap(), *k);
    }
    assert!(p < s);
    let (a, b) = (
        ResourceKey::server("a-b", "y"),
        ResourceKey::server("a", "x"),
    );
    assert_eq!(a.cmp(&b), a.to_string().cmp(&b.to_string()));
    assert!("Pod/x".parse::<ResourceKey>().is_err());
    assert!(p == "GpuPartition/kpro6" && p != "GpuPartition/kpro" && p != "InferenceServer/kpro6");
    assert!(s == "InferenceServer/default/qwen" && s != "InferenceServer/defaul/tqwen");
}
