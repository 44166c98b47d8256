//! Byte-preserving editors for the Proxmox VE files the agent touches.
//!
//! Why a custom editor: pmxcfs files (`/etc/pve/lxc/<vmid>.conf`, `/etc/pve/mapping/pci.cfg`)
//! are shared with humans and with PVE itself. The agent owns only a few lines in each file;
//! every other byte (comments, ordering, unknown keys, CRLF, missing trailing newline,
//! snapshot / `[pve:pending]` sections) must survive our edits unchanged, and our lines must
//! survive PVE's own normalising rewrite.
//!
//! Guarantees shared by both modules:
//! - parsing never fails; lines we do not understand are kept as opaque lines;
//! - `parse(x).render() == x` for every input string;
//! - edits touch only the lines the agent owns and are idempotent.
//!
//! Both files are limited to 1 MiB by pmxcfs (`MEMDB_MAX_FILE_SIZE` in pve-cluster's
//! `src/pmxcfs/memdb.h`; a larger write fails with `EFBIG`); the editors hold the whole file in
//! memory, which is fine at that size. They do not do I/O or locking: the
//! caller reads, edits and writes back (comparing the digest / using cfs locks as needed).

mod lines;
pub mod lxc_conf;
pub mod pci_cfg;
