//! Script calls written straight into one command buffer.
//!
//! redis-rs's `ScriptInvocation` keeps each key and argument in a vector of its own, then
//! copies them all into the command it sends: one allocation and one copy per argument more
//! than needed, and a key built as a `String` first costs one more of each.
//! The batches of the message path carry several arguments per chat, so they build the
//! `EVALSHA` command themselves, each argument written once, and load the script when the
//! server lost it (a restart), as `ScriptInvocation` does.

use std::io::Write;

use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind, ToRedisArgs,
};

use crate::conn::Conn;

/// A call of a script by its hash: its keys first, then its arguments.
pub(crate) struct ScriptCall<'a> {
    script: &'a Script,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` whose first `keys` arguments are its keys. `args` (keys included)
    /// and `bytes` size the buffer.
    pub(crate) fn new(script: &'a Script, keys: usize, args: usize, bytes: usize) -> Self {
        let mut cmd = Cmd::with_capacity(args + 3, bytes + 64);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Self { script, cmd }
    }

    /// Appends a key or an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call, loading the script first if the server does not have it.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut Conn) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(conn).await?;
                self.cmd.query_async(conn).await
            }
            sent => sent,
        }
    }

    /// The `EVALSHA` command, to send in a pipeline of one's own.
    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// Loads the script into the server's cache.
    pub(crate) async fn load(&self, conn: &mut Conn) -> RedisResult<()> {
        self.script.prepare_invoke().load_async(conn).await.map(drop)
    }
}

/// One argument made of parts, written without joining them first.
pub(crate) struct Concat<'a, const N: usize>(pub(crate) [&'a str; N]);

impl<const N: usize> ToRedisArgs for Concat<'_, N> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        let mut arg = out.writer_for_next_arg();
        for part in self.0 {
            // Writing into the command's buffer cannot fail.
            let _ = arg.write_all(part.as_bytes());
        }
    }
}

impl<const N: usize> std::fmt::Display for Concat<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|part| f.write_str(part))
    }
}

#[cfg(test)]
mod tests {
    use redis::ToRedisArgs;

    use super::Concat;

    #[test]
    fn parts_are_written_as_one_argument() {
        let args = Concat(["p", ":t:", "chat-1"]).to_redis_args();
        assert_eq!(args, vec![b"p:t:chat-1".to_vec()]);
    }
}
