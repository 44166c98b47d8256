//! The documentation's command blocks, so that a documented command that stops working fails
//! the suite (`e2e/tests/docs.rs` runs them).
//!
//! A command block is a fenced code block whose language is `sh`, `bash`, `shell` or `console`
//! (found with pulldown-cmark, as CommonMark renders it). The rest of its info string says where
//! it runs; GitHub shows only the language:
//!
//! | info string | runs |
//! |---|---|
//! | `sh` | on the simulated twin, in a scratch directory holding the clone's `examples/`, `charts/` and `crds/`, `gpuplane` on `PATH`; a page's blocks run in order in one shell, so a later block sees an earlier one's files and variables |
//! | `sh in-repo` | the same, in the clone itself (`cargo run`) |
//! | `sh kube` | against the test API server (etcd + kube-apiserver, the CRDs and RBAC installed, an agent running for node kpro6 on the twin), `KUBECONFIG` set |
//! | `sh real-host: REASON` or `sh not-run: REASON` | not run; the reason is required |
//!
//! `exit=N` after `sh`, `sh in-repo` or `sh kube` says the block must end with exit status N (a
//! documented refusal: `sh exit=2`); it then runs in a subshell, so its variables stay there.
//!
//! An indented code block, or a fence without a language, is refused: it could hide a command.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use std::path::{Path, PathBuf};

/// Where a command block runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Where {
    Twin,
    InRepo,
    Kube,
    /// Not run, and why.
    NotRun(String),
}

/// One command block of a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// 1-based line of its opening fence.
    pub line: usize,
    pub at: Where,
    /// The exit status it must end with (0 unless `exit=N`).
    pub exit: i32,
    pub code: String,
}

const SHELLS: [&str; 4] = ["sh", "bash", "shell", "console"];

/// The command blocks of one page's `text`; `Err` names, one line each, every block whose info
/// string says nothing this module knows or leaves out a reason, and every indented code block.
pub fn blocks(text: &str) -> Result<Vec<Block>, String> {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut out = vec![];
    let mut open: Option<(usize, Option<(Where, i32)>)> = None;
    let mut code = String::new();
    let mut errors = vec![];
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)) => errors.push(format!(
                "line {}: an indented code block: fence it with its language (```sh, ```yaml, ```text)",
                line_of(range.start)
            )),
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let line = line_of(range.start);
                let at = classify(&info).unwrap_or_else(|e| {
                    errors.push(format!("line {line}: {e}"));
                    None
                });
                open = Some((line, at));
                code.clear();
            }
            Event::Text(t) if open.is_some() => code.push_str(&t),
            Event::End(TagEnd::CodeBlock) => {
                if let Some((line, Some((at, exit)))) = open.take() {
                    out.push(Block {
                        line,
                        at,
                        exit,
                        code: std::mem::take(&mut code),
                    });
                }
            }
            _ => {}
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("\n"))
    }
}

/// `None` for a block that is not a command block; else where it runs and the exit status it
/// must end with.
fn classify(info: &str) -> Result<Option<(Where, i32)>, String> {
    if info.trim().is_empty() {
        return Err("a fence without a language: name it (```sh, ```yaml, ```text)".into());
    }
    let (lang, rest) = info
        .trim()
        .split_once(char::is_whitespace)
        .unwrap_or((info.trim(), ""));
    if !SHELLS.contains(&lang) {
        return Ok(None);
    }
    let rest = rest.trim();
    if let Some(r) = rest
        .strip_prefix("real-host:")
        .or_else(|| rest.strip_prefix("not-run:"))
    {
        return if r.trim().len() < 10 {
            Err(format!(
                "{info:?}: say why it is not run (at least a few words)"
            ))
        } else {
            Ok(Some((Where::NotRun(r.trim().to_string()), 0)))
        };
    }
    let (mut at, mut exit) = (Where::Twin, 0);
    for word in rest.split_whitespace() {
        match word {
            "in-repo" if at == Where::Twin => at = Where::InRepo,
            "kube" if at == Where::Twin => at = Where::Kube,
            w => match w.strip_prefix("exit=").and_then(|n| n.parse().ok()) {
                Some(n) if exit == 0 => exit = n,
                _ => {
                    return Err(format!(
                        "{info:?}: after the language: in-repo or kube, exit=N, or real-host: REASON / not-run: REASON"
                    ))
                }
            },
        }
    }
    Ok(Some((at, exit)))
}

/// The pages whose command blocks are tested: the README, `docs/*.md`, the architecture map and
/// the chart's README (relative to the clone's root, sorted).
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "charts/gpuplane/README.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// One shell script running `blocks` in order (`set -euo pipefail`), each announced on stdout
/// with its page and line (`### README.md:42`), each `in-repo` one in a subshell in `repo`;
/// background jobs are killed when it ends.
pub fn script(page: &str, blocks: &[&Block], repo: &Path) -> String {
    let mut s =
        String::from("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    for b in blocks {
        s.push_str(&format!("echo '### {page}:{}'\n", b.line));
        let cd = match b.at {
            Where::InRepo => format!("cd '{}'\n", repo.display()),
            _ => String::new(),
        };
        if b.exit != 0 {
            s.push_str(&format!(
                "set +e\n(\n{cd}{}\n)\nrc=$?\nset -e\n[ \"$rc\" -eq {n} ] || {{ echo \"### expected exit status {n}, got $rc\"; exit 1; }}\n",
                b.code,
                n = b.exit
            ));
        } else if !cd.is_empty() {
            s.push_str(&format!("(\n{cd}{}\n)\n", b.code));
        } else {
            s.push_str(&b.code);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_blocks_are_found_and_classified() {
        let md = "# t\n\n```sh\necho a\n```\n\n- item\n\n  ```sh kube\n  kubectl get x\n  ```\n\n```yaml\na: 1\n```\n\n```sh real-host: reboots the host it runs on\nreboot\n```\n";
        let b = blocks(md).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(
            (b[0].line, &b[0].at, b[0].code.as_str()),
            (3, &Where::Twin, "echo a\n")
        );
        assert_eq!(b[0].exit, 0);
        assert_eq!(
            (b[1].at.clone(), b[1].code.as_str()),
            (Where::Kube, "kubectl get x\n")
        );
        assert_eq!(b[2].at, Where::NotRun("reboots the host it runs on".into()));
    }

    #[test]
    fn an_unknown_mark_a_missing_reason_or_an_indented_block_is_refused() {
        assert!(blocks("```sh maybe\nx\n```\n")
            .unwrap_err()
            .contains("line 1"));
        assert!(blocks("```sh real-host:\nx\n```\n").is_err());
        assert!(blocks("```sh kube kube\nx\n```\n").is_err());
        assert!(blocks("```sh exit=two\nx\n```\n").is_err());
        assert!(blocks("```\nx\n```\n").unwrap_err().contains("language"));
        assert!(blocks("text\n\n    kubectl patch x\n")
            .unwrap_err()
            .contains("indented"));
    }

    #[test]
    fn a_block_may_have_to_fail_with_a_given_status() {
        let b = blocks("```sh kube exit=2\nfalse\n```\n").unwrap();
        assert_eq!((&b[0].at, b[0].exit), (&Where::Kube, 2));
        for (code, ok) in [("exit 2", true), ("true", false), ("exit 1", false)] {
            let block = Block {
                line: 1,
                at: Where::Twin,
                exit: 2,
                code: code.into(),
            };
            let s = script("p.md", &[&block], Path::new("/"));
            let st = std::process::Command::new("bash")
                .arg("-c")
                .arg(&s)
                .output()
                .unwrap();
            assert_eq!(st.status.success(), ok, "{code}: {s}");
        }
    }
}
