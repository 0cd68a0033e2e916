//! Gzip input as gzip(1) reads it: members one after another, then optionally zero bytes (tape
//! padding), and nothing else.

use std::io::{self, BufRead, Read};

use flate2::bufread::GzDecoder;

/// Counts the bytes consumed from the compressed stream, for error messages.
pub(super) struct Counted<R> {
    inner: R,
    consumed: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.consumed += amt as u64;
        self.inner.consume(amt);
    }
}

/// Decompresses gzip members in sequence. After a member ends, the next byte decides: the end
/// of the input ends the stream, `0x1f` starts another member, zero bytes up to the end are
/// padding (gzip(1) ignores them too), and anything else is an error that says where the
/// trailing data starts, instead of the decoder's "invalid gzip header".
pub(super) struct GzipMembers<R: BufRead> {
    state: State<R>,
    /// 1-based number of the member being read.
    member: u64,
}

enum State<R: BufRead> {
    Member(Box<GzDecoder<Counted<R>>>),
    Between(Counted<R>),
    Done,
}

impl<R: BufRead> GzipMembers<R> {
    pub(super) fn new(reader: R) -> Self {
        let counted = Counted {
            inner: reader,
            consumed: 0,
        };
        GzipMembers {
            state: State::Member(Box::new(GzDecoder::new(counted))),
            member: 1,
        }
    }
}

/// What follows a complete member: another member, zero padding up to the end, or the end.
fn after_member<R: BufRead>(reader: &mut Counted<R>, member: u64) -> io::Result<bool> {
    let end_of_member = reader.consumed;
    loop {
        let offset = reader.consumed;
        let buf = reader.fill_buf()?;
        let Some(&first) = buf.first() else {
            return Ok(false);
        };
        if first == 0x1f && offset == end_of_member {
            return Ok(true);
        }
        match buf.iter().position(|&b| b != 0) {
            None => {
                let n = buf.len();
                reader.consume(n);
            }
            Some(k) => {
                let at = offset + k as u64;
                let padding = at - end_of_member;
                let after = if padding > 0 {
                    format!(" and {padding} zero bytes")
                } else {
                    String::new()
                };
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "trailing data that is not gzip at compressed byte {at}, after the end of \
                         gzip member {member}{after} (gzip(1) would warn \"trailing garbage \
                         ignored\"): the file is corrupt or has data appended"
                    ),
                ));
            }
        }
    }
}

impl<R: BufRead> Read for GzipMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Done => return Ok(0),
                State::Member(mut decoder) => match decoder.read(buf) {
                    Ok(0) => {
                        self.state = State::Between(decoder.into_inner());
                    }
                    Ok(n) => {
                        self.state = State::Member(decoder);
                        return Ok(n);
                    }
                    Err(e) => {
                        let at = decoder.get_ref().consumed;
                        let member = self.member;
                        return Err(io::Error::new(
                            e.kind(),
                            format!("gzip member {member} (near compressed byte {at}): {e}"),
                        ));
                    }
                },
                State::Between(mut reader) => {
                    if after_member(&mut reader, self.member)? {
                        self.member += 1;
                        self.state = State::Member(Box::new(GzDecoder::new(reader)));
                    } else {
                        return Ok(0);
                    }
                }
            }
        }
    }
}
