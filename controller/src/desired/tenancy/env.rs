//! Which environment variables a tenant's `InferenceServer` may set: an allow-list.
//!
//! A deny-list loses: `NCCL_NET_PLUGIN` loads a library as `LD_PRELOAD` does, `HF_ENDPOINT` or
//! `HTTPS_PROXY` redirects downloads, `XDG_CACHE_HOME` or `TORCH_EXTENSIONS_DIR` moves a code
//! cache, and new names come with every release of every library in the process. So a tenant
//! may set the names below (values that tune CUDA, NCCL, PyTorch and thread pools, and switch
//! downloads off) and what the slice's admin adds (`servers.allowedEnv`); the admin sets
//! anything else itself (`servers.env`).

/// Names any server may set. None of them names a file, a library, a host or a code cache.
pub const TENANT_ENV: &[&str] = &[
    // Threads.
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    // CUDA.
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_DEVICE_MAX_COPY_CONNECTIONS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    // PyTorch's NCCL watchdog.
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_AVOID_RECORD_STREAMS",
    // NCCL tuning (not its plugins, topology, graph, config or debug files).
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_LAUNCH_MODE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_IGNORE_DISABLED_P2P",
    // Downloads off (never where they come from).
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_HUB_DISABLE_TELEMETRY",
];

/// Whether a server may set `name` under the admin's `allowed` list (exact names, or a prefix
/// followed by `*`). Case matters, as it does to the programs that read them.
pub fn tenant_may_set(name: &str, allowed: &[String]) -> bool {
    TENANT_ENV.contains(&name)
        || allowed.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => !prefix.is_empty() && name.starts_with(prefix),
            None => a == name,
        })
}
