//! The one way Mulligan starts a child process and ends it: a clean environment, so no
//! setting, key or token of Mulligan's reaches a tool server or an agent (CONTRACT §6), and
//! its own process group, so what it started itself (npx → node, an agent's CLI) ends with it.
use std::ffi::{OsStr, OsString};

/// The variables a child inherits from Mulligan's environment (the official MCP SDKs'
/// default set), besides every `LC_*`; everything else is left behind.
const INHERITED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR",
];

/// Whether a variable of Mulligan's own environment passes to a child.
fn inherited(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    INHERITED.contains(&name) || name.starts_with("LC_")
}

/// The environment a child starts with: the inherited part of `parent`, then `own` (the
/// variables its config names, which win over an inherited one of the same name).
pub fn environment<P, O, K, V>(parent: P, own: O) -> Vec<(OsString, OsString)>
where
    P: IntoIterator<Item = (OsString, OsString)>,
    O: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut env: Vec<(OsString, OsString)> =
        parent.into_iter().filter(|(k, _)| inherited(k)).collect();
    for (k, v) in own {
        let (k, v) = (k.as_ref().to_os_string(), v.as_ref().to_os_string());
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
    env
}

/// A command for `program` whose environment is [`environment`] of Mulligan's own plus
/// `own`, in a process group of its own ([`kill_group`] ends it); callers add arguments,
/// stdio and the rest.
pub fn command<K, V>(
    program: impl AsRef<OsStr>,
    own: impl IntoIterator<Item = (K, V)>,
) -> tokio::process::Command
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear().envs(environment(std::env::vars_os(), own));
    #[cfg(unix)]
    cmd.process_group(0);
    cmd
}

/// Kills a child started by [`command`] and every process of its group: a grandchild left
/// behind would hold the child's files and its slot's memory after it is gone.
pub fn kill_group(child: &mut tokio::process::Child) {
    // An id only while not yet reaped, so it still names this process group. (`try_wait`
    // is no test: while the runtime shuts down it errs, and the group would be left.)
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is
            // touched.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
    let _ = child.start_kill();
}

/// A child started by [`command`], killed with its group when dropped (its task ends, or
/// Mulligan shuts down).
pub struct Child(pub tokio::process::Child);

impl Child {
    /// Whether it has exited within a moment, and `" (exit status …)"` if so.
    pub async fn exit_status(&mut self) -> (bool, String) {
        match tokio::time::timeout(std::time::Duration::from_secs(2), self.0.wait()).await {
            Ok(Ok(status)) => (true, format!(" ({status})")),
            _ => (false, String::new()),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        kill_group(&mut self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_default_set_and_the_configs_own_pass() {
        let parent = vars(&[
            ("PATH", "/bin"),
            ("HOME", "/home/op"),
            ("LC_ALL", "C.UTF-8"),
            ("LANG", "C"),
            ("MULLIGAN_TOKEN", "tok-secret-1234567890"),
            ("MULLIGAN_DATABASE_URL", "postgres://u:p@db/x"),
            ("ANTHROPIC_API_KEY", "sk-ant-123"),
            ("OPENAI_API_KEY", "sk-123"),
            ("LD_PRELOAD", "/tmp/evil.so"),
        ]);
        let env = environment(parent, [("GITHUB_TOKEN", "ghp_own"), ("HOME", "/srv/tool")]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "LANG", "GITHUB_TOKEN", "HOME"]);
        let home = env.iter().find(|(k, _)| k == "HOME").unwrap();
        assert_eq!(home.1, "/srv/tool", "the config's own value wins");
    }

    #[test]
    fn a_name_that_only_starts_like_an_inherited_one_stays_behind() {
        let env = environment(
            vars(&[
                ("PATHEXT", "x"),
                ("HOMEBREW_GITHUB_API_TOKEN", "y"),
                ("LC", "z"),
            ]),
            Vec::<(String, String)>::new(),
        );
        assert!(env.is_empty(), "{env:?}");
    }

    #[tokio::test]
    async fn a_started_child_sees_none_of_mulligans_settings() {
        // The test process's own environment holds whatever CI set; a child sees only the
        // inherited set and its own.
        let out = command("env", [("TOOL_OWN", "1")])
            .output()
            .await
            .expect("env runs");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let name = line.split('=').next().unwrap_or_default();
            assert!(
                inherited(OsStr::new(name)) || name == "TOOL_OWN",
                "the child saw {name}"
            );
        }
        assert!(text.lines().any(|l| l == "TOOL_OWN=1"), "{text}");
    }
}
