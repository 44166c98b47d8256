use super::*;
use crate::sglang::{command, flags};

#[test]
fn every_row_is_a_real_sglang_flag_by_its_primary_name() {
    for name in table().keys() {
        let f = flags::lookup(name).unwrap_or_else(|| panic!("{name} is not in server-args.tsv"));
        assert_eq!(
            &f.name, name,
            "{name} is an alias; the table uses primary names"
        );
    }
}

#[test]
fn the_agent_s_own_flags_are_nobody_else_s() {
    for f in command::MANAGED_FLAGS {
        assert_ne!(rule(f).who, Who::Tenant, "{f} is set by the agent");
    }
}

#[test]
fn the_flags_that_run_code_or_reach_elsewhere_are_admin_only() {
    // The ways in of issue 23, each tried against the reference example.
    for f in [
        "--forward-hooks",
        "--enable-custom-logit-processor",
        "--config",
        "--tokenizer-path",
        "--trust-remote-code",
        "--custom-weight-loader",
        "--tool-server",
        "--trust-request-chat-template",
        "--model-loader-extra-config",
        "--json-model-override-args",
        "--hicache-storage-backend",
        "--hicache-storage-backend-extra-config",
        "--load-format",
        "--lora-paths",
        "--sidecar",
        "--nccl-port",
        "--dist-init-addr",
    ] {
        let r = rule(f);
        assert_eq!(r.who, Who::Admin, "{f}");
        assert!(r.why.starts_with("code or reach: "), "{f}: {}", r.why);
    }
    // Not listed at all: admin-only as well.
    assert_eq!(rule("--enable-pdmux").who, Who::Admin);
}

#[test]
fn serving_tunables_are_the_tenant_s() {
    for f in [
        "--max-running-requests",
        "--chunked-prefill-size",
        "--schedule-policy",
        "--log-level",
        "--attention-backend",
        "--chat-template",
    ] {
        assert_eq!(rule(f).who, Who::Tenant, "{f}");
    }
    assert_eq!(rule("--chat-template").value, Value::Template);
    assert_eq!(rule("--download-dir").value, Value::Path);
    assert_eq!(rule("--max-running-requests").value, Value::Plain);
}

#[test]
fn a_tenant_flag_takes_no_path_unless_the_table_says_so() {
    // Every path-like flag name among the tenant rows is marked as a path or template.
    for (name, r) in table() {
        if r.who == Who::Tenant
            && ["path", "dir", "file", "folder"]
                .iter()
                .any(|w| name.contains(w))
        {
            assert_ne!(r.value, Value::Plain, "{name}");
        }
    }
}

#[test]
fn template_names_cannot_name_a_file_elsewhere() {
    assert!(is_template_name("chatml"));
    assert!(is_template_name("qwen2.5-vl"));
    for v in ["", ".", "..", "etc/shadow", "/etc/shadow", "a b", "x\0"] {
        assert!(!is_template_name(v), "{v:?}");
    }
}
