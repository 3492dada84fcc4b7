//! Where the ranks of a multi-process run meet (torchrun's `--master HOST:PORT`): rank 0
//! listens, every other rank connects and says who it is; rank 0 checks that every rank runs
//! the same world size on the same model file (a fingerprint of the GGUF header) and, once all
//! have come, sends every rank the same payload (the NCCL unique id). Nothing else travels
//! here: the collectives are NCCL's. Every wait has a deadline, and a refused rank hears why,
//! so a missing rank or a mismatched file is an error naming it, never a hang.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use glint_gguf::Gguf;

const MAGIC: [u8; 4] = *b"GLTP";
const VERSION: u32 = 1;
/// Largest payload or refusal message accepted (the NCCL id is 128 bytes).
const MAX_MSG: u32 = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("rendezvous at {master}: {what} within {secs:.1} s (rank {rank} of {world})")]
    Timeout {
        master: String,
        rank: usize,
        world: usize,
        what: String,
        secs: f64,
    },
    #[error("rendezvous at {master}: rank {rank} {what}: it has {theirs}, rank 0 has {mine}")]
    Mismatch {
        master: String,
        rank: usize,
        what: &'static str,
        mine: String,
        theirs: String,
    },
    #[error("rendezvous at {master}: refused by rank 0: {msg}")]
    Refused { master: String, msg: String },
    #[error("rendezvous at {master}: {msg}")]
    Protocol { master: String, msg: String },
    #[error("rendezvous at {master}: {op}: {source}")]
    Io {
        master: String,
        op: &'static str,
        source: std::io::Error,
    },
}

/// Who this process is and where the ranks meet.
#[derive(Clone, Debug)]
pub struct Rendezvous {
    /// `HOST:PORT` rank 0 listens on and the others connect to.
    pub master: String,
    pub rank: usize,
    pub world: usize,
    /// How long any rank waits for the others (rank 0: for every rank to join; the others:
    /// for rank 0 to listen and answer).
    pub timeout: Duration,
}

/// FNV-1a 64 over the header of a GGUF: every metadata key and value, every tensor's name,
/// type, dims and offset. Equal files give equal fingerprints in every process of any build of
/// this version; a different file (or a different quantization of the same model) does not.
pub fn header_fingerprint(gguf: &Gguf) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h = (h ^ x as u64).wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
    };
    for (k, v) in gguf.metadata().entries() {
        eat(k.as_bytes());
        eat(format!("{v:?}").as_bytes());
    }
    for t in gguf.tensors() {
        eat(t.name.as_bytes());
        eat(t.ty.name().as_bytes());
        for d in &t.dims {
            eat(&d.to_le_bytes());
        }
        eat(&t.offset.to_le_bytes());
        eat(&(t.shard as u64).to_le_bytes());
    }
    h
}

impl Rendezvous {
    /// Meets the other ranks. Rank 0 calls `payload` once every rank has joined and checked,
    /// sends its bytes to all, and returns them; every other rank returns what rank 0 sent.
    pub fn join(
        &self,
        fingerprint: u64,
        payload: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>, RendezvousError> {
        if self.world == 0 || self.rank >= self.world {
            return Err(self.protocol(format!(
                "rank {} is outside the allowed range 0..{}",
                self.rank, self.world
            )));
        }
        if self.rank == 0 {
            self.serve(fingerprint, payload)
        } else {
            self.connect(fingerprint)
        }
    }

    fn protocol(&self, msg: String) -> RendezvousError {
        RendezvousError::Protocol {
            master: self.master.clone(),
            msg,
        }
    }

    fn io(&self, op: &'static str) -> impl Fn(std::io::Error) -> RendezvousError + '_ {
        move |source| RendezvousError::Io {
            master: self.master.clone(),
            op,
            source,
        }
    }

    fn timeout(&self, what: String) -> RendezvousError {
        RendezvousError::Timeout {
            master: self.master.clone(),
            rank: self.rank,
            world: self.world,
            what,
            secs: self.timeout.as_secs_f64(),
        }
    }

    fn serve(
        &self,
        fingerprint: u64,
        payload: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Vec<u8>, RendezvousError> {
        let deadline = Instant::now() + self.timeout;
        let listener = TcpListener::bind(&self.master).map_err(self.io("listening"))?;
        listener
            .set_nonblocking(true)
            .map_err(self.io("listening"))?;
        let mut peers: Vec<Option<TcpStream>> = (0..self.world).map(|_| None).collect();
        let mut joined = 1;
        let result = loop {
            if joined == self.world {
                break Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = (1..self.world).filter(|&r| peers[r].is_none()).collect();
                break Err(self.timeout(format!("ranks {missing:?} did not join")));
            }
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(self.io("accepting"))?;
                    // A connection that never says hello must not hold up the others.
                    let wait = (deadline - now).min(Duration::from_secs(5));
                    s.set_read_timeout(Some(wait.max(Duration::from_millis(10))))
                        .map_err(self.io("accepting"))?;
                    let hello = match read_hello(&mut s) {
                        Ok(h) => h,
                        // A stray connection (a port scan, a wrong client): not a rank.
                        Err(_) => continue,
                    };
                    let refusal = self.check(&hello, fingerprint, &peers);
                    match refusal {
                        None => {
                            peers[hello.rank] = Some(s);
                            joined += 1;
                        }
                        Some(e) => {
                            let _ = send(&mut s, 1, e.to_string().as_bytes());
                            break Err(e);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => break Err(self.io("accepting")(e)),
            }
        };
        let result = result.and_then(|()| payload().map_err(|m| self.protocol(m)));
        match result {
            Ok(bytes) => {
                for s in peers.iter_mut().flatten() {
                    send(s, 0, &bytes).map_err(self.io("sending the payload"))?;
                }
                Ok(bytes)
            }
            Err(e) => {
                // Every rank that came hears why the run stops.
                for s in peers.iter_mut().flatten() {
                    let _ = send(s, 1, e.to_string().as_bytes());
                }
                Err(e)
            }
        }
    }

    fn check(
        &self,
        h: &Hello,
        fingerprint: u64,
        peers: &[Option<TcpStream>],
    ) -> Option<RendezvousError> {
        let mismatch = |what, mine: String, theirs: String| {
            Some(RendezvousError::Mismatch {
                master: self.master.clone(),
                rank: h.rank,
                what,
                mine,
                theirs,
            })
        };
        if h.version != VERSION {
            return mismatch(
                "runs another rendezvous version",
                VERSION.to_string(),
                h.version.to_string(),
            );
        }
        if h.world != self.world {
            return mismatch(
                "has another world size",
                self.world.to_string(),
                h.world.to_string(),
            );
        }
        if h.fingerprint != fingerprint {
            return mismatch(
                "has another model file (GGUF header fingerprint)",
                format!("{fingerprint:016x}"),
                format!("{:016x}", h.fingerprint),
            );
        }
        if h.rank == 0 || h.rank >= self.world {
            return Some(self.protocol(format!(
                "a process claims rank {}, outside 1..{}",
                h.rank, self.world
            )));
        }
        if peers[h.rank].is_some() {
            return Some(self.protocol(format!("two processes claim rank {}", h.rank)));
        }
        None
    }

    fn connect(&self, fingerprint: u64) -> Result<Vec<u8>, RendezvousError> {
        let deadline = Instant::now() + self.timeout;
        let addrs: Vec<_> = self
            .master
            .to_socket_addrs()
            .map_err(self.io("resolving"))?
            .collect();
        let mut s = loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timeout("rank 0 was not listening".into()));
            }
            let left = deadline - now;
            match addrs
                .iter()
                .find_map(|a| TcpStream::connect_timeout(a, left.min(Duration::from_secs(1))).ok())
            {
                Some(s) => break s,
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(&MAGIC);
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&(self.rank as u32).to_le_bytes());
        hello.extend_from_slice(&(self.world as u32).to_le_bytes());
        hello.extend_from_slice(&fingerprint.to_le_bytes());
        s.write_all(&hello).map_err(self.io("sending hello"))?;
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .map_err(self.io("waiting for rank 0"))?;
        let mut head = [0u8; 5];
        if let Err(e) = s.read_exact(&mut head) {
            return Err(match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    self.timeout("rank 0 did not answer (the other ranks did not all join)".into())
                }
                _ => self.io("waiting for rank 0")(e),
            });
        }
        let len = u32::from_le_bytes(head[1..5].try_into().unwrap());
        if len > MAX_MSG {
            return Err(self.protocol(format!("rank 0 sent {len} bytes")));
        }
        let mut body = vec![0u8; len as usize];
        s.read_exact(&mut body)
            .map_err(self.io("reading rank 0's answer"))?;
        match head[0] {
            0 => Ok(body),
            _ => Err(RendezvousError::Refused {
                master: self.master.clone(),
                msg: String::from_utf8_lossy(&body).into_owned(),
            }),
        }
    }
}

struct Hello {
    version: u32,
    rank: usize,
    world: usize,
    fingerprint: u64,
}

fn read_hello(s: &mut TcpStream) -> std::io::Result<Hello> {
    let mut b = [0u8; 24];
    s.read_exact(&mut b)?;
    if b[..4] != MAGIC {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a glint rank",
        ));
    }
    let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    Ok(Hello {
        version: u(4),
        rank: u(8) as usize,
        world: u(12) as usize,
        fingerprint: u64::from_le_bytes(b[16..24].try_into().unwrap()),
    })
}

/// `[status][len u32][bytes]`: status 0 = the payload, 1 = why the run was refused.
fn send(s: &mut TcpStream, status: u8, bytes: &[u8]) -> std::io::Result<()> {
    let mut m = Vec::with_capacity(5 + bytes.len());
    m.push(status);
    m.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    m.extend_from_slice(bytes);
    s.write_all(&m)
}
