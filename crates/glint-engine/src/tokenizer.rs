//! Byte-level BPE tokenizer rebuilt from GGUF metadata.
//!
//! GGUF stores the vocabulary (`tokenizer.ggml.tokens`), merges and token types, plus a name for
//! the pre-tokenizer (`tokenizer.ggml.pre`) instead of its regex. We map that name to the regex
//! the original Hugging Face `tokenizer.json` used and assemble a `tokenizers::Tokenizer`, so
//! encoding follows the reference implementation rather than a re-implementation of BPE.
//! Decoding is done here from per-token bytes, because streaming output must be able to hold back
//! half of a UTF-8 character that spans two tokens.

use std::collections::HashMap;

use glint_gguf::Metadata;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer metadata: {0}")]
    Metadata(#[from] glint_gguf::GgufError),
    #[error("unsupported tokenizer model `{0}` (tokenizer.ggml.model); only byte-level BPE `gpt2` is supported")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer `{0}` (tokenizer.ggml.pre); supported: glm4, chatglm-bpe, llama-bpe, llama3, deepseek-v3, default")]
    UnsupportedPre(String),
    #[error("tokenizer.ggml.merges entry {index} `{merge}` has no space separating the pair")]
    BadMerge { index: usize, merge: String },
    #[error(
        "tokenizer.ggml.token_type has {found} entries but tokenizer.ggml.tokens has {expected}"
    )]
    TokenTypeCount { expected: usize, found: usize },
    #[error("{key} = {id} is outside the vocabulary of {n_vocab} tokens")]
    SpecialOutOfRange {
        key: String,
        id: u64,
        n_vocab: usize,
    },
    #[error("token id {id} is outside the vocabulary of {n_vocab} tokens")]
    UnknownId { id: u32, n_vocab: usize },
    #[error("tokenizers library: {0}")]
    Library(String),
    #[error("tokenizer.ggml.tokens is empty: the file has no vocabulary")]
    EmptyVocabulary,
    #[error(
        "cannot encode {ch:?} (U+{code:04X}) at byte {offset} of the text: the vocabulary has no \
         token or byte token for it"
    )]
    Unencodable { ch: char, code: u32, offset: usize },
}

pub type Result<T> = std::result::Result<T, TokenizerError>;

fn lib_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Library(e.to_string())
}

/// The tokenizer description stored in a GGUF, decoupled from the file so that tests and other
/// containers can build one directly.
#[derive(Debug, Clone, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model` (must be `gpt2`).
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    pub tokens: Vec<String>,
    /// `"left right"` pairs in priority order.
    pub merges: Vec<String>,
    /// One of [`token_type`] per token; empty means all NORMAL.
    pub token_types: Vec<i32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub chat_template: Option<String>,
    /// `tokenizer.ggml.add_bos_token`, if present.
    pub add_bos: Option<bool>,
}

impl TokenizerSpec {
    pub fn from_metadata(md: &Metadata) -> Result<Self> {
        let opt_id = |key: &str| -> Result<Option<u32>> {
            match md.get(key) {
                None => Ok(None),
                Some(_) => Ok(Some(md.get_u32(key)?)),
            }
        };
        let model = md.get_str("tokenizer.ggml.model")?.to_string();
        let pre = match md.get("tokenizer.ggml.pre") {
            Some(_) => md.get_str("tokenizer.ggml.pre")?.to_string(),
            None => {
                // llama.cpp does the same (and warns the same way): old converters omitted it.
                tracing::warn!(
                    "tokenizer.ggml.pre is missing: using llama.cpp's 'default' pre-tokenizer; \
                     text may split differently from the model's original tokenizer"
                );
                "default".to_string()
            }
        };
        let tokens: Vec<String> = md
            .get_str_array("tokenizer.ggml.tokens")?
            .into_iter()
            .map(str::to_string)
            .collect();
        let merges: Vec<String> = match md.get("tokenizer.ggml.merges") {
            Some(_) => md
                .get_str_array("tokenizer.ggml.merges")?
                .into_iter()
                .map(str::to_string)
                .collect(),
            None => Vec::new(),
        };
        let token_types = match md.get("tokenizer.ggml.token_type") {
            Some(_) => md.get_i32_array("tokenizer.ggml.token_type")?,
            None => Vec::new(),
        };
        let chat_template = match md.get("tokenizer.chat_template") {
            Some(_) => Some(md.get_str("tokenizer.chat_template")?.to_string()),
            None => None,
        };
        Ok(Self {
            model,
            pre,
            tokens,
            merges,
            token_types,
            bos: opt_id("tokenizer.ggml.bos_token_id")?,
            eos: opt_id("tokenizer.ggml.eos_token_id")?,
            eot: opt_id("tokenizer.ggml.eot_token_id")?,
            eom: opt_id("tokenizer.ggml.eom_token_id")?,
            chat_template,
            add_bos: match md.get("tokenizer.ggml.add_bos_token") {
                Some(_) => Some(md.get_bool("tokenizer.ggml.add_bos_token")?),
                None => None,
            },
        })
    }
}

/// The pre-tokenizer regexes of the original `tokenizer.json` files, by GGUF `pre` name.
fn pre_tokenizer_regexes(pre: &str) -> Result<(Vec<&'static str>, bool)> {
    // GLM-4/5 and Llama 3 share one regex; GLM spells the contractions as character classes.
    const GLM4: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    // DeepSeek-V3 applies three splits in sequence: digit groups, CJK runs, then the word regex.
    const DS3: [&str; 3] = [
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ];
    // The bool is BPE `ignore_merges`: llama.cpp (and Llama 3's tokenizer.json) look whole
    // pre-tokens up in the vocabulary before merging; GLM and DeepSeek do not.
    match pre {
        "glm4" | "chatglm-bpe" => Ok((vec![GLM4], false)),
        "llama-bpe" | "llama3" | "llama-v3" => Ok((vec![LLAMA3], true)),
        "deepseek-v3" => Ok((DS3.to_vec(), false)),
        // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT, used when the key is missing: a punctuation
        // run, GPT-2's word rule, digit runs, then digit triples, applied in sequence.
        "default" => Ok((
            vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                r"\p{N}+",
                r"[0-9][0-9][0-9]",
            ],
            false,
        )),
        other => Err(TokenizerError::UnsupportedPre(other.to_string())),
    }
}

/// GPT-2's reversible byte <-> printable-char table: printable Latin-1 bytes stand for
/// themselves, the other 68 bytes are shifted to U+0100 and up, in byte order.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        table[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or('\0')
        };
    }
    table
}

/// Raw bytes of a vocabulary entry, as llama.cpp's `token_to_piece` reads a BPE vocabulary
/// (fixtures/glm5/llamacpp/detok.json, tests/detok_llamacpp.rs): NORMAL entries are unmapped
/// through the GPT-2 byte table; CONTROL, UNKNOWN, USER_DEFINED (and UNUSED) entries are plain
/// text, printed as written; a BYTE entry `<0xHH>` is the one byte HH.
fn token_to_bytes(text: &str, ty: i32, char_to_byte: &HashMap<char, u8>) -> Vec<u8> {
    match ty {
        token_type::CONTROL
        | token_type::UNKNOWN
        | token_type::USER_DEFINED
        | token_type::UNUSED => return text.as_bytes().to_vec(),
        token_type::BYTE => {
            let hex = text.strip_prefix("<0x").and_then(|h| h.strip_suffix('>'));
            let hex = hex.filter(|h| h.len() == 2 && h.bytes().all(|c| c.is_ascii_hexdigit()));
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                return vec![b];
            }
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte.get(&c) {
            Some(&b) => out.push(b),
            // Not a byte-level character: keep its UTF-8 as the HF ByteLevel decoder does.
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Decoded bytes of every token, indexed by id.
    bytes: Vec<Vec<u8>>,
    tokens: Vec<String>,
    token_types: Vec<i32>,
    bos: Option<u32>,
    eos: Option<u32>,
    /// End-of-generation ids: eos, eot, eom (deduplicated).
    eog: Vec<u32>,
    chat_template: Option<String>,
    add_bos: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.tokens.len())
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    pub fn from_metadata(md: &Metadata) -> Result<Self> {
        Self::from_spec(TokenizerSpec::from_metadata(md)?)
    }

    pub fn from_spec(spec: TokenizerSpec) -> Result<Self> {
        if spec.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(spec.model));
        }
        let (regexes, ignore_merges) = pre_tokenizer_regexes(&spec.pre)?;
        // llama.cpp: Llama 3 vocabularies default to a BOS, GLM never gets one automatically
        // (its chat template writes `[gMASK]<sop>`), others follow the GGUF flag.
        let add_bos = match spec.pre.as_str() {
            "glm4" | "chatglm-bpe" => false,
            "llama-bpe" | "llama3" | "llama-v3" => spec.add_bos.unwrap_or(true),
            _ => spec.add_bos.unwrap_or(false),
        } && spec.bos.is_some();
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        let token_types = if spec.token_types.is_empty() {
            vec![token_type::NORMAL; n]
        } else if spec.token_types.len() != n {
            return Err(TokenizerError::TokenTypeCount {
                expected: n,
                found: spec.token_types.len(),
            });
        } else {
            spec.token_types
        };
        for (key, id) in [
            ("tokenizer.ggml.bos_token_id", spec.bos),
            ("tokenizer.ggml.eos_token_id", spec.eos),
            ("tokenizer.ggml.eot_token_id", spec.eot),
            ("tokenizer.ggml.eom_token_id", spec.eom),
        ] {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(TokenizerError::SpecialOutOfRange {
                        key: key.to_string(),
                        id: id as u64,
                        n_vocab: n,
                    });
                }
            }
        }

        let mut vocab = tokenizers::models::bpe::Vocab::with_capacity(n);
        for (i, t) in spec.tokens.iter().enumerate() {
            // On duplicate strings keep the first id, as llama.cpp's text_to_token does.
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let mut merges = Vec::with_capacity(spec.merges.len());
        for (index, m) in spec.merges.iter().enumerate() {
            let (a, b) = m.split_once(' ').ok_or_else(|| TokenizerError::BadMerge {
                index,
                merge: m.clone(),
            })?;
            merges.push((a.to_string(), b.to_string()));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(ignore_merges)
            .build()
            .map_err(lib_err)?;

        let mut pre: Vec<PreTokenizerWrapper> = Vec::new();
        for r in regexes {
            let split = Split::new(
                SplitPattern::Regex(r.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(lib_err)?;
            pre.push(split.into());
        }
        pre.push(ByteLevel::new(false, false, false).into());

        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(pre)));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        // Control tokens are "special" (HF skips them when decoding with skip_special_tokens);
        // user-defined ones are plain added tokens. Both are matched before pre-tokenization.
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (t, &ty) in spec.tokens.iter().zip(&token_types) {
            match ty {
                token_type::CONTROL => special.push(AddedToken::from(t.clone(), true)),
                token_type::USER_DEFINED => user.push(AddedToken::from(t.clone(), false)),
                _ => {}
            }
        }
        inner.add_special_tokens(&special);
        inner.add_tokens(&user);

        let table = byte_to_char_table();
        let char_to_byte: HashMap<char, u8> = table
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let bytes = spec
            .tokens
            .iter()
            .zip(&token_types)
            .map(|(t, &ty)| token_to_bytes(t, ty, &char_to_byte))
            .collect();

        let mut eog = Vec::new();
        for id in [spec.eos, spec.eot, spec.eom].into_iter().flatten() {
            if !eog.contains(&id) {
                eog.push(id);
            }
        }
        tracing::debug!(
            n_vocab = n,
            n_merges = spec.merges.len(),
            pre = %spec.pre,
            n_control = special.len(),
            n_user_defined = user.len(),
            "tokenizer built"
        );
        Ok(Self {
            inner,
            bytes,
            tokens: spec.tokens,
            token_types,
            bos: spec.bos,
            eos: spec.eos,
            eog,
            chat_template: spec.chat_template,
            add_bos,
        })
    }

    /// Token ids of `text`. Control and user-defined tokens written in the text (e.g.
    /// `<|user|>`) become their single ids, as in `transformers` and llama.cpp with
    /// `parse_special`; no BOS is added (GLM's chat template writes `[gMASK]<sop>` itself).
    ///
    /// A character the vocabulary cannot spell (no token and no byte token for one of its
    /// bytes) is an error naming it: the BPE model would otherwise drop it silently.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(lib_err)?;
        let ids = enc.get_ids().to_vec();
        self.check_round_trip(text, &ids)?;
        Ok(ids)
    }

    /// The tokens' bytes must spell `text` exactly; the first place they do not is a character
    /// that was dropped.
    fn check_round_trip(&self, text: &str, ids: &[u32]) -> Result<()> {
        let want = text.as_bytes();
        let mut got = Vec::with_capacity(want.len());
        for &id in ids {
            got.extend_from_slice(self.token_bytes(id)?);
        }
        if got == want {
            return Ok(());
        }
        // The first differing byte is where a character went missing (the tokens after it
        // spell what follows it); back up to the start of that character.
        let at = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        let offset = (0..=at)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let ch = text[offset..].chars().next().unwrap_or('\u{FFFD}');
        Err(TokenizerError::Unencodable {
            ch,
            code: ch as u32,
            offset,
        })
    }

    /// Text of `ids`, with control tokens spelled out (`special`, llama.cpp's
    /// `token_to_piece(.., special = true)`); UNUSED tokens are always empty. Invalid UTF-8
    /// becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.decode_with(ids, true)
    }

    /// Text of `ids`; control (and unknown) tokens only when `special` is set.
    pub fn decode_with(&self, ids: &[u32], special: bool) -> Result<String> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.piece(id, special)?);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The bytes a token prints as, with llama.cpp's `token_to_piece` rules: UNUSED tokens (the
    /// `[PADnnnn]` rows padding a vocabulary to the embedding size) print nothing; CONTROL and
    /// UNKNOWN tokens print their text only when `special` is asked for; everything else
    /// prints its bytes (USER_DEFINED its text as written, BYTE `<0xHH>` the byte HH). Checked
    /// against llama.cpp's output for every type in tests/detok_llamacpp.rs.
    pub fn piece(&self, id: u32, special: bool) -> Result<&[u8]> {
        let bytes = self.token_bytes(id)?;
        Ok(match self.token_type(id).unwrap_or(token_type::NORMAL) {
            token_type::UNUSED => &[],
            token_type::CONTROL | token_type::UNKNOWN if !special => &[],
            _ => bytes,
        })
    }

    /// The raw bytes a token stands for (may be part of a UTF-8 character).
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .ok_or(TokenizerError::UnknownId {
                id,
                n_vocab: self.bytes.len(),
            })
    }

    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary entry as stored in the GGUF (byte-level spelling for normal tokens).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.token_types.get(id as usize).copied()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Whether a raw (non-chat) prompt should start with [`Tokenizer::bos`], as llama.cpp does.
    /// Chat templates write their own BOS text, so rendered chats never need it.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Token ids of a raw prompt: [`Tokenizer::encode`] plus the BOS the model expects, if any.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if let (true, Some(bos)) = (self.add_bos, self.bos) {
            ids.push(bos);
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Ids that end generation (eos, eot, eom as present in the GGUF).
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// A fresh incremental decoder for streaming output.
    /// An incremental decoder that prints control tokens only when `special` is set (llama.cpp
    /// `--special`); UNUSED tokens never print.
    pub fn stream(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder {
            tok: self,
            special,
            utf8: Utf8Stream::default(),
        }
    }
}

/// Incremental detokenizer: emits text as soon as it forms whole UTF-8 characters and holds
/// back a trailing partial character until the next token completes it.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    special: bool,
    utf8: Utf8Stream,
}

impl StreamDecoder<'_> {
    /// Adds one token and returns the text that became printable (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        Ok(self.utf8.push(self.tok.piece(id, self.special)?))
    }

    /// Returns whatever is left, with an incomplete trailing character as U+FFFD.
    pub fn finish(&mut self) -> String {
        self.utf8.finish()
    }
}

/// Bytes to text, incrementally: a trailing partial character is held back until more bytes
/// complete it; invalid bytes become U+FFFD at once (what [`StreamDecoder`] and the server's
/// text pipeline share).
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds bytes and returns the text that became whole (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        self.drain(false)
    }

    /// Returns whatever is left, with an incomplete trailing character as U+FFFD.
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, at_end: bool) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Safe by construction: from_utf8 vouched for this prefix.
                    out.push_str(&String::from_utf8_lossy(
                        &self.pending[start..start + valid],
                    ));
                    start += valid;
                    match e.error_len() {
                        // Truly invalid bytes: they can never become valid, replace now.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += bad;
                        }
                        // A character cut off at the end: wait for more bytes.
                        None => {
                            if at_end {
                                out.push(char::REPLACEMENT_CHARACTER);
                                start = self.pending.len();
                            }
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}

#[cfg(test)]
#[path = "tokenizer_tests.rs"]
mod tests;
