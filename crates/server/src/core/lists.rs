//! Lists that change while the server runs (a gateway upstream's tools, prompts and resources) and
//! telling clients so: `notifications/{tools,prompts,resources}/list_changed` on each 2025-11-25
//! session's standalone stream here, and on 2026-07-28 `subscriptions/listen` streams that asked.

use mcp_tasks_protocol::jsonrpc::Message;
use serde_json::json;

use super::Server;
use crate::tool::{GroupChange, Tool};

/// Which list changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list` and `resources/templates/list`.
    Resources,
}

impl ListKind {
    /// The notification that announces the change.
    pub fn notification(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
        }
    }
    /// The `subscriptions/listen` filter field that asks for it (2026-07-28).
    pub(crate) fn filter_field(self) -> &'static str {
        match self {
            ListKind::Tools => "toolsListChanged",
            ListKind::Prompts => "promptsListChanged",
            ListKind::Resources => "resourcesListChanged",
        }
    }
}

impl Server {
    /// Replaces the tools of `group` (e.g. one upstream's) with `tools`, handlers included, and tells
    /// clients when the list changed. Calls running under a removed tool go on.
    pub fn replace_tools(&self, group: &str, tools: Vec<Tool>) -> GroupChange {
        let handlers: Vec<_> = tools
            .iter()
            .map(|t| (t.name.clone(), t.handler.clone(), t.retry_on_restart))
            .collect();
        let before = self.tools.names();
        let change = self.tools.replace_group(group, tools);
        for (name, handler, retry) in handlers {
            if change.now.contains(&name) {
                self.engine.set_handler(name, handler, retry);
            }
        }
        for name in &change.gone {
            self.engine.remove_handler(name);
        }
        if self.tools.names() != before || !change.gone.is_empty() {
            self.list_changed(ListKind::Tools);
        }
        change
    }

    /// Tells clients that a list changed.
    pub fn list_changed(&self, kind: ListKind) {
        let _ = self.list_events.send(kind);
        let mut told = std::collections::HashSet::new();
        for (session, task, _, _) in self.streams.open_streams() {
            if task.is_none() && told.insert(session.clone()) {
                let note = Message::notification(kind.notification(), json!({}));
                self.streams.deliver_standalone(&session, vec![note]);
            }
        }
    }

    /// Whether a list can change while the server runs (so clients are told when it does).
    pub(crate) fn list_can_change(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.tools.can_change(),
            ListKind::Prompts | ListKind::Resources => !self.catalog.sources.is_empty(),
        }
    }

    /// List changes, for 2026-07-28 listen streams.
    pub(crate) fn list_changes(&self) -> tokio::sync::broadcast::Receiver<ListKind> {
        self.list_events.subscribe()
    }
}
