//! Demo tools and the official conformance suite's fixtures (`mcp-tasks serve --demo`), behind the
//! `demo` feature: they are not part of the library's default build.

pub mod fixtures;
pub mod tools;

use crate::core::ServerBuilder;
use crate::tool::ToolError;

impl ServerBuilder {
    /// Adds the demo tools, the conformance fixtures (tools, resources, templates, prompts) and the
    /// task demos.
    pub fn demo(mut self) -> Result<Self, ToolError> {
        for t in fixtures::core_tools()
            .into_iter()
            .chain(fixtures::stateless_tools())
            .chain(tools::tools())
        {
            self = self.tool(t)?;
        }
        let (resources, templates) = fixtures::resources();
        for r in resources {
            self = self.resource(r);
        }
        for t in templates {
            self = self.resource_template(t);
        }
        for p in fixtures::prompts() {
            self = self.prompt(p);
        }
        Ok(self)
    }
}
