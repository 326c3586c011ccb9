//! An agent's stdio as the ACP crate's line transport, bounded: a line from the agent longer
//! than [`MAX_LINE`] ends the connection instead of growing without end.
use futures::{SinkExt, StreamExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};

/// The longest JSON-RPC line an agent may send (a whole file's content in a tool call's
/// update fits; a stream that never ends a line does not).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// The transport over a child's stdin and stdout.
pub fn transport(
    stdin: ChildStdin,
    stdout: ChildStdout,
) -> agent_client_protocol::Lines<
    impl futures::Sink<String, Error = std::io::Error> + Send + 'static,
    impl futures::Stream<Item = std::io::Result<String>> + Send + 'static,
> {
    let incoming = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE))
        .map(|line| line.map_err(std::io::Error::other))
        // The first error (a line past the bound, bytes that are not UTF-8) ends the stream.
        .scan(false, |failed, line| {
            if *failed {
                return futures::future::ready(None);
            }
            *failed = line.is_err();
            futures::future::ready(Some(line))
        });
    let writer: FramedWrite<ChildStdin, LinesCodec> = FramedWrite::new(stdin, LinesCodec::new());
    let outgoing = SinkExt::<String>::sink_map_err(writer, std::io::Error::other);
    agent_client_protocol::Lines::new(outgoing, incoming)
}
