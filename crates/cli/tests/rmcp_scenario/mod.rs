//! The rmcp 3.x client scenarios, shared by the single-server interop test, the replicas behind a
//! balancer (`balanced.rs`) and the gateway (`gateway.rs`); each uses some of them.
#![allow(dead_code)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, CreateTaskResult, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ExtensionCapabilities, FormElicitationCapability, GetTaskParams,
    GetTaskResult, Implementation, InputRequest, InputResponses, JsonObject, ProtocolVersion,
    TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::json;
use std::time::Duration;

type Client = RunningService<RoleClient, ClientConfig>;

/// The whole scenario must finish within this (the longest step is a one-second task).
pub const LIMIT: Duration = Duration::from_secs(60);

/// Capabilities of a client that supports the tasks extension and form elicitation.
///
/// `ClientCapabilities::builder().enable_tasks()` exists, but rmcp only compiles the builder with
/// its `server` or `macros` feature; with the client-only features the fields are set directly.
fn client_config() -> ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some(ExtensionCapabilities::from([(
        rmcp::model::TASKS_EXTENSION_ID.to_string(),
        JsonObject::new(),
    )]));
    capabilities.elicitation =
        Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
    ClientConfig::new(
        capabilities,
        Implementation::new("mcp-tasks-rmcp-interop", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2026_07_28)
}

fn args(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        other => panic!("arguments must be an object, got {other}"),
    }
}

fn call(name: &'static str, arguments: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name).with_arguments(args(arguments))
}

/// The text of a tool result's first content block.
fn first_text(result: &CallToolResult) -> &str {
    result
        .content
        .first()
        .and_then(|block| block.as_text())
        .map(|text| text.text.as_str())
        .unwrap_or_else(|| panic!("no text content in {result:?}"))
}

/// Calls a tool that must be materialized as a task (the client declares the extension).
async fn create_task(client: &Client, params: CallToolRequestParams) -> CreateTaskResult {
    let name = params.name.clone();
    match client.call_tool_once(params).await.expect("tools/call") {
        CallToolResponse::Task(created) => {
            assert!(created.result_type.is_task(), "{created:?}");
            assert!(!created.task.task_id.is_empty(), "{created:?}");
            assert!(
                matches!(
                    created.task.status,
                    TaskStatus::Working | TaskStatus::InputRequired
                ),
                "{name}: seed status {:?}",
                created.task.status
            );
            created
        }
        other => panic!("{name}: expected a task (resultType \"task\"), got {other:?}"),
    }
}

/// Polls `tasks/get` until the task reaches `want`; a different terminal status fails the test.
async fn poll_until(client: &Client, task_id: &str, want: TaskStatus) -> GetTaskResult {
    loop {
        let got = client
            .get_task(GetTaskParams::new(task_id))
            .await
            .expect("tasks/get");
        assert_eq!(got.task.task.task_id, task_id);
        assert!(got.result_type.is_complete(), "{got:?}");
        let status = got.task.status();
        if status == want {
            return got;
        }
        assert!(
            !status.is_terminal(),
            "task {task_id} settled as {status:?} while waiting for {want:?}: {got:?}"
        );
        let interval = got.task.task.poll_interval_ms.unwrap_or(100).clamp(20, 250);
        tokio::time::sleep(Duration::from_millis(interval)).await;
    }
}

/// The `CallToolResult` inlined in a completed task.
fn completed_result(got: GetTaskResult) -> CallToolResult {
    match got.task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(serde_json::Value::Object(result))
                .expect("the inlined result is a CallToolResult")
        }
        other => panic!("expected a completed payload, got {other:?}"),
    }
}

/// The 2026-07-28 scenario against the endpoint at `url` (one server, or replicas behind a balancer).
pub async fn scenario(url: &str) {
    // Connect: `server/discover`, then stateless requests on 2026-07-28.
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client: Client = client_config()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect with server/discover");
    let info = client.peer_info().expect("server/discover result");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert!(
        info.capabilities.supports_tasks(),
        "the server advertises the tasks extension: {:?}",
        info.capabilities
    );

    // A synchronous tool: rmcp's high-level `call_tool` returns the final result.
    let greeting = client
        .call_tool(call("greet", json!({"name": "rmcp"})))
        .await
        .expect("greet");
    assert_ne!(greeting.is_error, Some(true), "{greeting:?}");
    assert_eq!(first_text(&greeting), "Hello, rmcp!");

    // A task that completes: poll `tasks/get` until the result is inlined.
    let created = create_task(
        &client,
        call("slow_compute", json!({"seconds": 1, "label": "rmcp"})),
    )
    .await;
    let done = poll_until(&client, &created.task.task_id, TaskStatus::Completed).await;
    let result = completed_result(done);
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(first_text(&result).contains("rmcp"), "{result:?}");

    // A task that needs input: one `elicitation/create` input request, answered with
    // `tasks/update`.
    let created = create_task(
        &client,
        call("confirm_delete", json!({"filename": "rmcp.txt"})),
    )
    .await;
    let task_id = created.task.task_id;
    let parked = poll_until(&client, &task_id, TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = parked.task.payload else {
        panic!("input_required without inputRequests");
    };
    assert_eq!(input_requests.len(), 1, "{input_requests:?}");
    let (key, request) = input_requests.into_iter().next().unwrap();
    let InputRequest::Elicitation(elicit) = request else {
        panic!("expected an elicitation/create input request, got {request:?}");
    };
    let ElicitRequestParams::FormElicitationParams {
        message,
        requested_schema,
        ..
    } = elicit.params
    else {
        panic!("expected a form elicitation, got {:?}", elicit.params);
    };
    assert!(message.contains("rmcp.txt"), "{message}");
    let schema = serde_json::to_value(&requested_schema).unwrap();
    assert_eq!(
        schema["properties"]["confirm"]["type"], "boolean",
        "{schema}"
    );
    let answer =
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": true}));
    client
        .update_task(UpdateTaskParams::new(
            task_id.clone(),
            InputResponses::from([(key, serde_json::to_value(answer).unwrap())]),
        ))
        .await
        .expect("tasks/update");
    let done = poll_until(&client, &task_id, TaskStatus::Completed).await;
    let result = completed_result(done);
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(
        first_text(&result).starts_with("Deleted rmcp.txt"),
        "{result:?}"
    );

    // A long task, cancelled: `tasks/cancel` is acknowledged and the task settles as cancelled.
    let created = create_task(&client, call("slow_compute", json!({"seconds": 60}))).await;
    let task_id = created.task.task_id;
    client
        .cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .expect("tasks/cancel");
    let cancelled = poll_until(&client, &task_id, TaskStatus::Cancelled).await;
    assert!(matches!(cancelled.task.payload, TaskPayload::Cancelled));

    client.cancel().await.expect("close the client");
}

/// The 2025-11-25 scenario: rmcp's `initialize` handshake; without the tasks extension
/// `slow_compute` answers inline (rmcp 3.x has no 2025-11-25 task API).
pub async fn legacy_scenario(url: &str) {
    let config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("mcp-tasks-rmcp-interop", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let client: Client = config
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("initialize");
    let info = client.peer_info().expect("initialize result");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);

    let greeting = client
        .call_tool(call("greet", json!({"name": "legacy"})))
        .await
        .expect("greet");
    assert_eq!(first_text(&greeting), "Hello, legacy!");

    let result = client
        .call_tool(call(
            "slow_compute",
            json!({"seconds": 0.2, "label": "inline"}),
        ))
        .await
        .expect("slow_compute inline");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(first_text(&result).contains("inline"), "{result:?}");

    client.cancel().await.expect("close the client");
}

/// Through a gateway in front of the Python SDK upstream (`py_count` with a sync budget of 1 s):
/// with the tasks extension the call is a task polled to completion; without it, a call past the
/// budget answers "continues as task ID" and `task_result` hands over the result.
pub async fn gateway_scenario(url: &str) {
    let client: Client = client_config()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect with server/discover");
    let created = create_task(&client, call("py_count", json!({"n": 3, "delay": 0.1}))).await;
    let done = poll_until(&client, &created.task.task_id, TaskStatus::Completed).await;
    assert_eq!(first_text(&completed_result(done)), "counted to 3");
    client.cancel().await.expect("close the client");

    // A client without the tasks extension.
    let plain = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("mcp-tasks-rmcp-interop", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2026_07_28);
    let client: Client = plain
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect with server/discover, no extension");
    let quick = client
        .call_tool(call("py_count", json!({"n": 2, "delay": 0.05})))
        .await
        .expect("a call within the budget");
    assert_eq!(first_text(&quick), "counted to 2");
    let slow = client
        .call_tool(call("py_count", json!({"n": 10, "delay": 0.2})))
        .await
        .expect("a call past the budget");
    assert!(
        first_text(&slow).contains("continues in the background as task"),
        "{slow:?}"
    );
    let id = slow
        .structured_content
        .as_ref()
        .and_then(|s| s.get("taskId"))
        .and_then(|v| v.as_str())
        .expect("structuredContent.taskId")
        .to_string();
    let mut last = String::new();
    for _ in 0..10 {
        let r = client
            .call_tool(call("task_result", json!({"taskId": id})))
            .await
            .expect("task_result");
        last = first_text(&r).to_string();
        if last == "counted to 10" {
            break;
        }
    }
    assert_eq!(last, "counted to 10");
    client.cancel().await.expect("close the client");
}
