//! The catalogue's tests: files, names, chains and the single-provider settings.
use super::*;

fn r(id: &str) -> ModelRef {
    let (p, m) = id.split_once('/').unwrap();
    ModelRef {
        provider: p.into(),
        model: m.into(),
    }
}

const FILE: &str = r#"{
    "providers": {
        "anthropic": {"kind": "anthropic", "api_key_env": "ANTHROPIC_API_KEY",
                      "models": [{"id": "claude-x"}, {"id": "shared"}]},
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1",
                  "models": [{"id": "llama", "tools": false}, {"id": "shared"}]},
        "demo": {}
    },
    "default_model": "anthropic/claude-x",
    "fallbacks": {"anthropic/claude-x": ["local/llama", "demo"]}
}"#;

#[test]
fn a_file_names_providers_models_and_chains() {
    let c = Catalogue::parse(FILE).unwrap();
    assert_eq!(c.default_model(), &r("anthropic/claude-x"));
    assert_eq!(
        c.chain(&r("anthropic/claude-x"), None),
        vec![r("anthropic/claude-x"), r("local/llama"), r("demo/demo")]
    );
    assert!(!c.tools(&r("local/llama")));
    assert!(c.tools(&r("anthropic/claude-x")));
    // The demo, named, is there with its own chain.
    assert_eq!(
        c.chain(&r("demo/demo-overloaded"), None),
        vec![r("demo/demo-overloaded"), r("demo/demo")]
    );
}

#[test]
fn bare_ids_resolve_when_one_entry_has_them() {
    let c = Catalogue::parse(FILE).unwrap();
    assert_eq!(c.resolve("llama").unwrap(), r("local/llama"));
    let both = c.resolve("shared").unwrap_err();
    assert!(both.contains("anthropic/shared and local/shared"), "{both}");
    assert!(c.resolve("nope").unwrap_err().contains("no provider has"));
    assert!(c
        .resolve("local/nope")
        .unwrap_err()
        .contains("has no model"));
}

#[test]
fn a_session_chain_overrides_and_no_model_repeats() {
    let c = Catalogue::parse(FILE).unwrap();
    let own = [r("demo/demo"), r("anthropic/claude-x")];
    assert_eq!(
        c.chain(&r("anthropic/claude-x"), Some(&own)),
        vec![r("anthropic/claude-x"), r("demo/demo")]
    );
    assert_eq!(
        c.chain(&r("anthropic/claude-x"), Some(&[])),
        vec![r("anthropic/claude-x")]
    );
}

#[test]
fn bad_files_say_what_to_fix() {
    let bad = |text: &str| Catalogue::parse(text).unwrap_err();
    assert!(
        bad(r#"{"providers": {"Big": {"kind": "openai", "models": [{"id": "m"}]}}}"#)
            .contains("names are")
    );
    assert!(
        bad(r#"{"providers": {"demo": {"kind": "openai", "models": [{"id": "m"}]}}}"#)
            .contains("built-in")
    );
    assert!(bad(r#"{"providers": {}}"#).contains("no providers"));
    assert!(bad(r#"{"providers": {"a": {"kind": "openai", "models": []}}}"#).contains("no models"));
    assert!(
        bad(r#"{"providers": {"a": {"kind": "grpc", "models": [{"id": "m"}]}}}"#)
            .contains("unknown variant")
    );
    assert!(bad(
        r#"{"providers": {"a": {"kind": "openai", "models": [{"id": "m"}]}},
            "fallbacks": {"a/m": ["a/zz"]}}"#
    )
    .contains("has no model"));
    assert!(bad(
        r#"{"providers": {"a": {"kind": "openai", "api_key": "sk-1", "models": [{"id": "m"}]}}}"#
    )
    .contains("unknown field"));
}

#[test]
fn the_single_provider_settings_are_a_one_entry_catalogue() {
    let c = Catalogue::single(Some(Kind::Openai), None, "gpt-x");
    assert_eq!(c.default_model(), &r("openai/gpt-x"));
    // An open entry takes any model id no entry lists, as one provider always did.
    assert_eq!(c.resolve("other-model").unwrap(), r("openai/other-model"));
    assert_eq!(c.resolve("demo-flaky").unwrap(), r("openai/demo-flaky"));
    // The demo's endpoint is not served beside a real provider: no demo entry, and the
    // open entry takes ids with a slash (`org/model`) too.
    assert_eq!(
        c.resolve("demo/demo-flaky").unwrap(),
        r("openai/demo/demo-flaky")
    );
    let demo = Catalogue::single(None, None, "demo");
    assert_eq!(demo.default_model(), &r("demo/demo"));
    assert_eq!(demo.resolve("gpt-x").unwrap(), r("demo/gpt-x"));
    assert_eq!(
        demo.resolve("demo-overloaded").unwrap(),
        r("demo/demo-overloaded")
    );
}

#[test]
fn a_file_has_the_demo_only_when_it_names_it() {
    let without = r#"{"providers": {"a": {"kind": "openai", "models": [{"id": "m"}]}}}"#;
    let c = Catalogue::parse(without).unwrap();
    assert!(c.provider(DEMO).is_none());
    assert!(c.resolve("demo/demo").is_err());
    assert_eq!(c.default_model(), &r("a/m"));
    let with = r#"{"providers": {"a": {"kind": "openai", "models": [{"id": "m"}]}, "demo": {}}}"#;
    let c = Catalogue::parse(with).unwrap();
    assert!(c.provider(DEMO).is_some_and(|e| e.demo));
    assert_eq!(
        c.default_model(),
        &r("a/m"),
        "the demo is never the default"
    );
    assert_eq!(
        c.resolve("demo-overloaded").unwrap(),
        r("demo/demo-overloaded")
    );
    let demo_only = Catalogue::parse(r#"{"providers": {"demo": {}}}"#).unwrap();
    assert_eq!(demo_only.default_model(), &r("demo/demo"));
}

#[test]
fn an_acp_entry_names_its_agent_and_its_models() {
    let c = Catalogue::parse(
        r#"{"providers": {
            "claude": {"kind": "acp", "command": "claude-agent-acp", "args": ["--x"],
                       "env_from": {"ANTHROPIC_API_KEY": "MY_KEY"}, "cwd": "/srv/work"},
            "codex": {"kind": "acp", "command": "codex-acp", "models": [{"id": "gpt-5"}]}
        }}"#,
    )
    .unwrap();
    let claude = c.provider("claude").unwrap();
    assert_eq!(claude.kind, Kind::Acp);
    let agent = claude.agent.as_ref().unwrap();
    assert_eq!(agent.command, "claude-agent-acp");
    assert_eq!(agent.args, ["--x"]);
    assert_eq!(agent.env_from["ANTHROPIC_API_KEY"], "MY_KEY");
    assert_eq!(agent.cwd.as_deref(), Some("/srv/work"));
    // No models listed: the agent's own choice, `default`.
    assert_eq!(c.resolve("claude/default").unwrap(), r("claude/default"));
    assert_eq!(c.resolve("codex/gpt-5").unwrap(), r("codex/gpt-5"));
    assert!(c.resolve("codex/default").is_err());
}

#[test]
fn a_bad_acp_entry_says_what_to_fix() {
    let bad = |entry: &str| {
        Catalogue::parse(&format!(r#"{{"providers": {{"a": {entry}}}}}"#)).unwrap_err()
    };
    assert!(bad(r#"{"kind": "acp"}"#).contains("command"));
    assert!(bad(r#"{"kind": "acp", "command": " "}"#).contains("empty"));
    assert!(bad(r#"{"kind": "acp", "command": "x", "base_url": "http://h"}"#).contains("base_url"));
    assert!(bad(r#"{"kind": "acp", "command": "x", "env": {"A=B": "1"}}"#).contains("variable"));
    // An HTTP provider does not take an agent's fields.
    assert!(
        bad(r#"{"kind": "openai", "command": "x", "models": [{"id": "m"}]}"#).contains("command")
    );
}
