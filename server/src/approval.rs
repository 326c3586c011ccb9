//! Which tool calls ask the operator first (CONTRACT §8 Policy): a source's rule from the
//! `mcpServers` file, the session's mode and remembered grants, and the tool's annotations,
//! weighed into one verdict. Pure: no I/O, tested here.
use app::wire::{ApprovalMode, GrantDecision, ToolAnnotations, ToolGrant};

/// A source's `"approval"` in the `mcpServers` file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rule {
    /// Ask before any tool not annotated `readOnlyHint: true` (the default).
    #[default]
    Writes,
    /// Ask before every call.
    Always,
    /// Never ask.
    Never,
}

impl Rule {
    /// The file's word for a source's rule; `None` for another word.
    pub fn parse(word: &str) -> Option<Rule> {
        Some(match word {
            "writes" => Rule::Writes,
            "always" => Rule::Always,
            "never" => Rule::Never,
            _ => return None,
        })
    }
}

/// A source's approval settings: its rule and the tools that override it
/// (`"approval_tools"`: only `always` or `never`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceRule {
    pub rule: Rule,
    pub tools: Vec<(String, Rule)>,
}

impl SourceRule {
    /// The rule for one of the source's tools.
    fn for_tool(&self, tool: &str) -> Rule {
        self.tools
            .iter()
            .find(|(t, _)| t == tool)
            .map_or(self.rule, |(_, r)| *r)
    }
}

/// What becomes of a call before anything is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It runs without asking.
    Run,
    /// It waits for the operator.
    Ask,
    /// An "always reject" the session remembers: it is denied without asking.
    Deny,
}

/// The verdict on a call of `tool` at `server`, in CONTRACT §8's order: a remembered
/// `reject` denies; else `ask_all` asks; else `trust` runs; else a remembered `allow` runs;
/// else the tool's rule, then the source's (`writes` asks unless the tool says it only
/// reads).
pub fn verdict(
    mode: ApprovalMode,
    grants: &[ToolGrant],
    source: &SourceRule,
    server: &str,
    tool: &str,
    annotations: &ToolAnnotations,
) -> Verdict {
    let grant = grants
        .iter()
        .find(|g| g.server == server && g.tool == tool)
        .map(|g| g.decision);
    if grant == Some(GrantDecision::Reject) {
        return Verdict::Deny;
    }
    match mode {
        ApprovalMode::AskAll => return Verdict::Ask,
        ApprovalMode::Trust => return Verdict::Run,
        ApprovalMode::Policy => {}
    }
    if grant == Some(GrantDecision::Allow) {
        return Verdict::Run;
    }
    match source.for_tool(tool) {
        Rule::Never => Verdict::Run,
        Rule::Always => Verdict::Ask,
        Rule::Writes if annotations.read_only == Some(true) => Verdict::Run,
        Rule::Writes => Verdict::Ask,
    }
}

/// What the model reads for a call the operator declined.
pub fn declined_text(reason: Option<&str>, timed_out: bool) -> String {
    let mut text = if timed_out {
        String::from(
            "The operator did not decide on this tool call in time, so it was not run. \
             Do not try it again unless the operator asks for it.",
        )
    } else {
        String::from(
            "The operator declined this tool call, so it was not run. Do not try it again \
             unless the operator asks for it.",
        )
    };
    if let Some(r) = reason.map(str::trim).filter(|r| !r.is_empty()) {
        text.push_str(" The operator's reason: ");
        text.push_str(r);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(read_only: Option<bool>) -> ToolAnnotations {
        ToolAnnotations {
            read_only,
            ..Default::default()
        }
    }

    fn grant(tool: &str, decision: GrantDecision) -> ToolGrant {
        ToolGrant {
            server: "fs".into(),
            tool: tool.into(),
            decision,
        }
    }

    #[test]
    fn writes_asks_unless_the_tool_says_it_only_reads() {
        let src = SourceRule::default();
        let v = |a| verdict(ApprovalMode::Policy, &[], &src, "fs", "t", &a);
        assert_eq!(v(ann(Some(true))), Verdict::Run);
        assert_eq!(v(ann(Some(false))), Verdict::Ask);
        assert_eq!(v(ann(None)), Verdict::Ask, "no annotation: it may write");
    }

    #[test]
    fn a_tool_overrides_its_source() {
        let src = SourceRule {
            rule: Rule::Never,
            tools: vec![("rm".into(), Rule::Always)],
        };
        let v = |tool| verdict(ApprovalMode::Policy, &[], &src, "fs", tool, &ann(None));
        assert_eq!(v("ls"), Verdict::Run);
        assert_eq!(v("rm"), Verdict::Ask);
        let always = SourceRule {
            rule: Rule::Always,
            tools: vec![],
        };
        let v = verdict(
            ApprovalMode::Policy,
            &[],
            &always,
            "fs",
            "ls",
            &ann(Some(true)),
        );
        assert_eq!(v, Verdict::Ask, "always asks even for a read-only tool");
    }

    #[test]
    fn the_session_mode_and_grants_come_first() {
        let src = SourceRule {
            rule: Rule::Never,
            tools: vec![],
        };
        let grants = [
            grant("write", GrantDecision::Allow),
            grant("rm", GrantDecision::Reject),
        ];
        let v = |mode, tool| verdict(mode, &grants, &src, "fs", tool, &ann(None));
        // CONTRACT §8's order: a reject grant, then ask_all, then trust, then an allow grant.
        assert_eq!(v(ApprovalMode::Policy, "rm"), Verdict::Deny);
        assert_eq!(
            v(ApprovalMode::Trust, "rm"),
            Verdict::Deny,
            "reject beats trust"
        );
        assert_eq!(v(ApprovalMode::AskAll, "rm"), Verdict::Deny);
        assert_eq!(v(ApprovalMode::AskAll, "ls"), Verdict::Ask);
        assert_eq!(
            v(ApprovalMode::AskAll, "write"),
            Verdict::Ask,
            "ask_all beats allow"
        );
        assert_eq!(v(ApprovalMode::Trust, "ls"), Verdict::Run);
        assert_eq!(v(ApprovalMode::Policy, "write"), Verdict::Run);
        // A grant is for its own source only.
        let other = verdict(
            ApprovalMode::AskAll,
            &grants,
            &src,
            "web",
            "write",
            &ann(None),
        );
        assert_eq!(other, Verdict::Ask);
    }

    #[test]
    fn a_declined_call_says_why() {
        let t = declined_text(Some("  not that file "), false);
        assert!(t.starts_with("The operator declined this tool call"));
        assert!(t.ends_with("reason: not that file"));
        assert!(!declined_text(Some(" "), false).contains("reason"));
        assert!(declined_text(None, true).contains("did not decide"));
    }
}
