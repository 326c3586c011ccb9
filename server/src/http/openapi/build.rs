//! How the document is built: each endpoint's operation (its body, answer, parameters and the
//! shared error answer), the SSE events' schemas, and the components they refer to.
use app::api::{self, Endpoint, Method, Route};
use app::wire::{
    ApiError, AttemptEvent, ClearCooldown, CreateSession, DecideToolCall, Delta, Message,
    PatchSession, PostMessage, Regenerate, Run, Session, ToolCallEvent,
};
use utoipa::openapi::path::{Operation, OperationBuilder, Parameter, ParameterIn};
use utoipa::openapi::request_body::{RequestBody, RequestBodyBuilder};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder};
use utoipa::openapi::security::{SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, HttpMethod, InfoBuilder, ObjectBuilder, OneOfBuilder,
    OpenApi, OpenApiBuilder, Paths, Ref, RefOr, Required, Response, ResponseBuilder, Schema,
    Server, Type,
};
use utoipa::ToSchema;

pub(super) const JSON: &str = "application/json";
const ERROR_RESPONSE: &str = "Error";

/// A request body's schema, or none: `()` takes no body.
pub(super) trait Body {
    fn request_body(schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RequestBody>;
}

impl Body for () {
    fn request_body(_: &mut Vec<(String, RefOr<Schema>)>) -> Option<RequestBody> {
        None
    }
}

/// [`Body`] for wire types sent as JSON; `optional`: an empty body is accepted too.
macro_rules! json_body {
    ($($ty:ty: $required:expr),* $(,)?) => {$(
        impl Body for $ty {
            fn request_body(schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RequestBody> {
                Some(
                    RequestBodyBuilder::new()
                        .required(Some($required))
                        .content(JSON, ContentBuilder::new().schema(Some(reference::<$ty>(schemas))).build())
                        .build(),
                )
            }
        }
    )*};
}

json_body!(
    CreateSession: Required::True,
    PatchSession: Required::True,
    PostMessage: Required::True,
    Regenerate: Required::False,
    ClearCooldown: Required::True,
    DecideToolCall: Required::True,
);

/// A `$ref` to `T`'s schema, noting `T` and the types it names among the components.
fn reference<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
    Ref::from_schema_name(T::name()).into()
}

/// Each SSE `event:` name, the wire type its `data:` holds and a `$ref` to that type.
pub(super) fn event_data(
    schemas: &mut Vec<(String, RefOr<Schema>)>,
) -> Vec<(&'static str, String, RefOr<Schema>)> {
    fn data<T: ToSchema>(
        name: &'static str,
        schemas: &mut Vec<(String, RefOr<Schema>)>,
    ) -> (&'static str, String, RefOr<Schema>) {
        (name, T::name().into_owned(), reference::<T>(schemas))
    }
    vec![
        data::<Message>("message", schemas),
        data::<Delta>("delta", schemas),
        data::<Run>("run", schemas),
        data::<AttemptEvent>("attempt", schemas),
        data::<Session>("session", schemas),
        data::<ToolCallEvent>("tool_call", schemas),
    ]
}

#[derive(Default)]
pub(super) struct Doc {
    paths: Paths,
    schemas: Vec<(String, RefOr<Schema>)>,
}

impl Doc {
    /// A typed endpoint of the table: its body, its success status and answer, its errors.
    pub(super) fn endpoint<Req: Body, Resp: ToSchema>(
        &mut self,
        endpoint: &Endpoint<Req, Resp>,
        name: &str,
        status: u16,
        summary: &str,
        query: &[(&str, &str)],
    ) {
        let description = match status {
            201 => "Created",
            202 => "Accepted",
            _ => "OK",
        };
        let answer = ResponseBuilder::new()
            .description(description)
            .content(
                JSON,
                ContentBuilder::new()
                    .schema(Some(reference::<Resp>(&mut self.schemas)))
                    .build(),
            )
            .build();
        let params = query
            .iter()
            .map(|(name, text)| parameter(name, ParameterIn::Query, text, false))
            .collect();
        let op = operation(
            endpoint.route,
            name,
            summary,
            status,
            answer,
            params,
            Req::request_body(&mut self.schemas),
        );
        self.add(endpoint.route, op);
    }

    /// An untyped route (not JSON both ways): its one success answer, `200`.
    pub(super) fn route(
        &mut self,
        route: Route,
        name: &str,
        summary: &str,
        answer: Response,
        params: Vec<Parameter>,
    ) {
        let op = operation(route, name, summary, 200, answer, params, None);
        self.add(route, op);
    }

    /// `GET /sessions/{sid}/events` and `GET /events`: Server-Sent Events, each `data:` a
    /// wire type.
    pub(super) fn events(&mut self) {
        let events = event_data(&mut self.schemas);
        let by_name: Vec<String> = events
            .iter()
            .map(|(event, ty, _)| format!("`{event}`: {ty}"))
            .collect();
        let data = |extra: &str| {
            let data = OneOfBuilder::new().description(Some(format!(
                "Each event's `data:` JSON, by its `event:` name ({}){extra}; each `id:` is \
                 greater than the last.",
                by_name.join(", ")
            )));
            events
                .iter()
                .fold(data, |data, (_, _, schema)| data.item(schema.clone()))
        };
        let stream = |description: &str, data: OneOfBuilder| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "text/event-stream",
                    ContentBuilder::new().schema(Some(data)).build(),
                )
                .build()
        };
        let params = vec![
            parameter(
                "Last-Event-ID",
                ParameterIn::Header,
                "Resume after this event id",
                false,
            ),
            parameter(
                "last_event_id",
                ParameterIn::Query,
                "Resume after this event id, when the header cannot be set",
                false,
            ),
        ];
        self.route(
            api::EVENTS,
            "EVENTS",
            "The session's Server-Sent Events, resumable",
            stream(
                "The session's events: the ones after `Last-Event-ID`, then live",
                data(""),
            ),
            params,
        );
        let marker = format!(
            "; and `{}`, a session id as a JSON string: the events after it, up to the next \
             one, are that session's (ids are greater than the last of the same session)",
            app::wire::SESSION_MARKER
        );
        self.route(
            api::FOLLOW,
            "FOLLOW",
            "Several sessions' Server-Sent Events in one stream (one per browser, not per tab)",
            stream(
                "Each session's events after its own id, then live, each run of them after a \
                 marker naming its session",
                data(&marker),
            ),
            vec![parameter(
                "sessions",
                ParameterIn::Query,
                &format!(
                    "The sessions to follow, 1 to {}: `ID:LAST_EVENT_ID,…`, each resumed \
                     after its own event id (`:LAST_EVENT_ID` left out: from now on). To \
                     resume, open the stream again with the ids last seen; `Last-Event-ID` \
                     is not read.",
                    app::wire::MAX_FOLLOWED
                ),
                true,
            )],
        );
    }

    fn add(&mut self, route: Route, op: Operation) {
        let method = match route.method {
            Method::Get => HttpMethod::Get,
            Method::Post => HttpMethod::Post,
            Method::Patch => HttpMethod::Patch,
            Method::Delete => HttpMethod::Delete,
        };
        self.paths.add_path_operation(route.path, vec![method], op);
    }

    pub(super) fn build(self) -> OpenApi {
        let mut schemas = self.schemas;
        let error = ResponseBuilder::new()
            .description("Refused: `{\"error\": {\"code\", \"message\"}}`, the one error shape")
            .content(
                JSON,
                ContentBuilder::new()
                    .schema(Some(reference::<ApiError>(&mut schemas)))
                    .build(),
            )
            .build();
        let components = ComponentsBuilder::new()
            .schemas_from_iter(schemas)
            .response(ERROR_RESPONSE, error)
            .security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some("The operator token `mulligan serve` printed"))
                        .build(),
                ),
            )
            .security_scheme(
                "cookie",
                SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                    crate::http::auth::COOKIE,
                    "Set by opening `/?token=…`; a request that changes state must come from \
                     this origin",
                ))),
            )
            .build();
        OpenApiBuilder::new()
            .info(
                InfoBuilder::new()
                    .title("Mulligan")
                    .version(env!("CARGO_PKG_VERSION"))
                    .description(Some(
                        "Mulligan's HTTP API. Every request needs the operator token: \
                         `Authorization: Bearer <token>` or the session cookie.",
                    ))
                    .build(),
            )
            .servers(Some([Server::new(api::PREFIX)]))
            .paths(self.paths)
            .components(Some(components))
            .security(Some([
                SecurityRequirement::new("bearer", Vec::<String>::new()),
                SecurityRequirement::new("cookie", Vec::<String>::new()),
            ]))
            .build()
    }
}

/// An operation: tagged by its first path segment, with its path parameters, its success
/// answer and the shared error answer for every 4xx and 5xx.
fn operation(
    route: Route,
    name: &str,
    summary: &str,
    status: u16,
    answer: Response,
    extra: Vec<Parameter>,
    body: Option<RequestBody>,
) -> Operation {
    let tag = route
        .path
        .trim_start_matches('/')
        .split(['/', '.'])
        .next()
        .unwrap_or_default();
    let error = || Ref::from_response_name(ERROR_RESPONSE);
    OperationBuilder::new()
        .operation_id(Some(name.to_ascii_lowercase()))
        .summary(Some(summary))
        .tag(tag)
        .parameters(Some(path_parameters(route).into_iter().chain(extra)))
        .request_body(body)
        .response(status.to_string(), answer)
        .response("4XX", error())
        .response("5XX", error())
        .build()
}

/// The `{…}` segments of a route's path, each a required string.
fn path_parameters(route: Route) -> Vec<Parameter> {
    route
        .path
        .split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let text = match name {
                "sid" => "A session id",
                "mid" => "An operator message id",
                "rid" => "A run id",
                "cid" => "A tool call id",
                _ => name,
            };
            parameter(name, ParameterIn::Path, text, true)
        })
        .collect()
}

fn parameter(name: &str, at: ParameterIn, text: &str, required: bool) -> Parameter {
    Parameter::builder()
        .name(name)
        .parameter_in(at)
        .description(Some(text))
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}
