//! The tool shapes a model step offers: each tool by the name the model sees, its
//! description and schema read from its source's shared list.
use app::wire::ToolInfo;
use serde_json::Value;
use std::sync::Arc;

/// A tool a model may call in a step, by the name it was given. Its description and schema
/// stay in its source's shared list: a run holds no copy of them.
#[derive(Clone, Debug)]
pub struct Offered {
    pub model_name: String,
    pub server: String,
    source: Arc<Vec<ToolInfo>>,
    /// Where the tool is in `source` (checked by [`Offered::new`]).
    index: usize,
}

impl Offered {
    /// The tool at `index` of its source's list, offered as `model_name`; `None` if the list
    /// has no such tool.
    pub fn new(
        model_name: String,
        server: &str,
        source: Arc<Vec<ToolInfo>>,
        index: usize,
    ) -> Option<Offered> {
        (index < source.len()).then(|| Offered {
            model_name,
            server: server.to_string(),
            source,
            index,
        })
    }

    fn info(&self) -> &ToolInfo {
        &self.source[self.index]
    }

    /// The tool's name at its source.
    pub fn tool(&self) -> &str {
        &self.info().name
    }

    pub fn description(&self) -> &str {
        self.info().description.as_deref().unwrap_or_default()
    }

    pub fn input_schema(&self) -> &Value {
        &self.info().input_schema
    }

    /// What its source says of it.
    pub fn annotations(&self) -> app::wire::ToolAnnotations {
        self.info().annotations()
    }
}
