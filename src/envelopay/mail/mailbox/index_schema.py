"""The mailbox index's schema and its version: what `index` creates and `index_upgrade`
brings an older file to. A module of its own so that the upgrade, which `index` runs on
open, reads them without importing `index` back."""

_VERSION = 5

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: the FTS rowid
    id TEXT NOT NULL UNIQUE,
    folder TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE,           -- Maildir base name (without :2,flags)
    file TEXT NOT NULL,                  -- new/NAME or cur/NAME:2,FLAGS, as last seen
    message_id TEXT,
    from_addr TEXT NOT NULL,
    from_lc TEXT NOT NULL,
    to_addrs TEXT NOT NULL,
    cc_addrs TEXT NOT NULL,
    subject TEXT NOT NULL,
    subject_lc TEXT NOT NULL,
    ts REAL NOT NULL,
    header_date TEXT,
    in_reply_to TEXT,
    refs TEXT NOT NULL,
    reply_to TEXT,
    body_head TEXT NOT NULL,
    body_len INTEGER NOT NULL,
    attachments TEXT NOT NULL,
    read INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    problems TEXT NOT NULL,
    protocol_type TEXT,
    thread TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_folder_ts ON messages(folder, ts);
CREATE INDEX IF NOT EXISTS messages_msgid ON messages(message_id);
CREATE INDEX IF NOT EXISTS messages_thread ON messages(thread, ts);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    from_addr, subject, body, content='');  -- rowid = -seq
CREATE TABLE IF NOT EXISTS thread_ids (message_id TEXT PRIMARY KEY, thread TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_ids_thread ON thread_ids(thread);
CREATE TABLE IF NOT EXISTS threads (thread TEXT PRIMARY KEY, last_ts REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS threads_recent ON threads(last_ts);
CREATE TABLE IF NOT EXISTS dirs (dir TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS texts (seq INTEGER PRIMARY KEY, z BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
"""
