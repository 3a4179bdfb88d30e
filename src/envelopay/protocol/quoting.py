"""What in a text body is the sender's own, and what is quoted, forwarded or added by
a list: the text rules of payload placement (SPEC.md "Payload placement", rules T1-T7).

Mail clients mark old text in a few shapes, and each shape is recognised by its form,
in any of the languages listed, never by one client's exact sample:

- `>` quoting (RFC 3676 section 4.5; every client's plain-text reply)         -> T1
- an attribution line ending in a "wrote:" verb (Gmail, Apple Mail,
  Thunderbird, Yahoo, Alpine: "On ... wrote:", "Am ... schrieb ...:",
  "Le ... a écrit :", "El ... escribió:")                                       -> T2
- a title line between runs of dashes naming a message ("-----Original
  Message-----", "---------- Forwarded message ---------", "-------- Message
  transféré --------", "----- Mensaje reenviado -----")                         -> T3
- a forward introduction line ("Begin forwarded message:", "Anfang der
  weitergeleiteten Nachricht:", "Début du message réexpédié :")                -> T3
- a block of mail header lines with at least two of From/To/Cc/Date/Subject,
  in any listed language and with Outlook's `*bold*` marks ("From: ... Sent:
  ... To: ... Subject:", "Von: ... Gesendet: ...", "De : ... Envoyé : ...",
  "差出人: ... 送信日時: ...", "发件人： ... 主题：")                          -> T4
- a mailing-list footer under a rule of underscores, dashes or `=`            -> T5
- a signature under `-- ` (RFC 3676 section 4.3)                              -> T6

Quoted or forwarded content is never the request: T2 (when the quote is not
`>`-marked), T3 and T4 end the sender's own text. Linear in the text size.
"""

from __future__ import annotations

import re

__all__ = ["own_text"]

_LINE_SPLIT = re.compile(r"\r\n|\n|\r")
_SIG = ("-- ", "--")
_LOOKAHEAD = 6  # lines a header block or a list footer may take after its first line

# T2: "wrote" in the languages the clients ship (en, de, fr, es, it, pt, nl, sv/da/no,
# pl, fi, ru, tr); the line ends with the verb and a colon.
_WROTE = re.compile(
    r"(?:wrote|writes|schrieb|schreibt|geschrieben|geschreven|a\s+écrit|écrit|escribió|escribio|ha\s+scritto|scrisse"
    r"|escreveu|schreef|skrev|napisał(?:\(a\)|a)?|kirjoitti|написал(?:\(а\)|а)?|yazdı)"
    r"[ \t\u00a0]*:[ \t\u00a0]*$",
    re.IGNORECASE,
)
_MAX_ATTRIBUTION = 400
# An attribution names a date or an address; "Here is what I wrote:" does neither.
_DATE_OR_ADDRESS = re.compile(r"[0-9@]")
# T3: a title between dashes that names a message (stems cover the listed languages).
_MESSAGE_WORD = (
    r"messag|nachricht|mensaj|mensag|messaggio|bericht|meddelande|besked|wiadomo|viesti|сообщени"
    r"|forward|original|origin|ursprüngl|weiterge|transf|réexp|reenv|inoltr|encaminh|doorgest"
    # Outlook's titles in Chinese, Japanese and Korean: original, forwarded (message).
    r"|原始|元の|원본|转发|轉寄|転送|전달|邮件|郵件|メッセージ|메시지"
)
_DASH_TITLE = re.compile(r"[ \t]*-{2,}[ \t]*[^-\s][^\n]{0,60}?[ \t]*-{2,}[ \t]*")
_TITLE_WORD = re.compile(_MESSAGE_WORD, re.IGNORECASE)
_FORWARD_INTRO = re.compile(
    r"[ \t]*[^\n:{}\"]{0,60}(?:forwarded|weitergeleitet|réexpédié|transféré|reenviado|inoltrato"
    r"|encaminhad|reencaminhad|doorgestuurd|vidarebefordra|videresend|przekazan|пересланн)"
    r"[^\n:{}\"]{0,40}[ \t\u00a0]*:[ \t]*",
    re.IGNORECASE,
)
# T4: a header line; `*From:*` is Outlook's bold in plain text; French puts a space
# (often U+00A0) before the colon; Chinese Outlook writes the full-width colon U+FF1A.
_HEADER_LINE = re.compile(
    r"[ \t\u00a0]*\*{0,2}([^\W\d_][^\W\d]*(?:[ .'’-][^\W\d]+){0,2})[ \t\u00a0]?\*{0,2}[:\uff1a]"
)
_ROLES: dict[str, str] = {}
for _kind, _names in {
    # Outlook's labels in Japanese (差出人 送信日時 宛先 件名), Chinese simplified
    # (发件人 发送时间 收件人 抄送 主题) and traditional (寄件者 寄件日期 收件者 副本 主旨), Korean.
    "from": "from von de da van från fra od от expéditeur remitente mittente remetente afzender"
    " 差出人 送信者 发件人 寄件者 寄件人",
    "to": "to an à a para pour aan till til do кому destinataire destinatario destinatário"
    " 宛先 收件人 收件者",
    "cc": "cc kopie copie copia kopia копия 抄送 副本 참조",
    "date": "date sent datum gesendet envoyé fecha enviado enviada data inviato verzonden skickat sendt"
    " wysłano lähetetty дата отправлено 送信日時 日付 发送时间 日期 寄件日期 傳送時間",
    "subject": "subject betreff objet sujet asunto oggetto assunto onderwerp ämne emne temat aihe тема"
    " 件名 主题 主旨 제목",
}.items():
    for _name in _names.split():
        _ROLES.setdefault(_name, _kind)
for _name, _kind in {
    "envoyé le": "date",
    "enviado el": "date",
    "inviato il": "date",
    "enviada em": "date",
    "sent on": "date",
    "copie à": "cc",
    "보낸 사람": "from",
    "받는 사람": "to",
    "보낸 날짜": "date",
}.items():
    _ROLES[_name] = _kind
# T5: a rule line, then list text within a few lines.
_RULE = re.compile(r"[ \t]*(?:_{8,}|-{8,}|={8,})[ \t]*")
_LIST_FOOTER = re.compile(
    r"mailing list|listinfo|unsubscribe|mailman|googlegroups|groups\.io|list-unsubscribe"
    r"|abbestellen|abmelden|désabonner|désinscri|darse de baja|desuscrib|cancelar la suscripción",
    re.IGNORECASE,
)


def _role(line: str) -> str | None:
    m = _HEADER_LINE.match(line)
    if m is None:
        return None
    return _ROLES.get(m.group(1).lower())


def _header_block(lines: list[str], i: int) -> bool:
    """T4: lines[i] starts a block of header lines naming at least two roles, one of
    them From or Subject (a forward or reply header, never the sender's own prose)."""
    first = _role(lines[i])
    if first is None:
        return False
    roles = {first}
    for line in lines[i + 1 : i + 1 + _LOOKAHEAD]:
        if line[:1] in (" ", "\t") and line.strip():
            continue  # a folded header value
        role = _role(line)
        if role is None:
            break
        roles.add(role)
    return len(roles) >= 2 and bool(roles & {"from", "subject"})


def _list_footer(lines: list[str], i: int) -> bool:
    return any(_LIST_FOOTER.search(line) for line in lines[i + 1 : i + 1 + _LOOKAHEAD])


def _next_quoted(lines: list[str], i: int) -> bool:
    """Is the first non-blank line after lines[i] `>`-quoted?"""
    for line in lines[i + 1 : i + 1 + _LOOKAHEAD]:
        if line.strip():
            return line.lstrip().startswith(">")
    return i + 1 + _LOOKAHEAD >= len(lines)  # nothing follows: the attribution heads nothing of the sender's


def _attribution(lines: list[str], i: int) -> bool:
    """T2: a line ending in a "wrote:" verb that names a date or an address (Gmail
    wraps long attributions, so the line before counts too)."""
    line = lines[i]
    if len(line) > _MAX_ATTRIBUTION or _WROTE.search(line, max(0, len(line) - 80)) is None:
        return False
    before = lines[i - 1] if i > 0 else ""
    return _DATE_OR_ADDRESS.search(line) is not None or _DATE_OR_ADDRESS.search(before) is not None


def own_text(text: str) -> str:
    """The sender's own text: quotes, forwards, list footers and the signature removed."""
    lines = _LINE_SPLIT.split(text)
    kept: list[str] = []
    for i, line in enumerate(lines):
        if line in _SIG:
            break  # T6: everything after a `-- ` line is signature
        stripped = line.lstrip()
        if stripped.startswith(">"):
            continue  # T1: quoted text from an earlier message
        if not stripped or stripped[0] in '{"[':
            kept.append(line)  # JSON and blank lines are never a quote header
            continue
        if _attribution(lines, i):
            if _next_quoted(lines, i):
                continue  # T2: the attribution of a `>` quote; text after the quote is kept
            break  # T2: an unmarked quote (Yahoo, Outlook) runs to the end
        if _DASH_TITLE.fullmatch(line) and _TITLE_WORD.search(line):
            break  # T3
        if _FORWARD_INTRO.fullmatch(line):
            break  # T3
        if _header_block(lines, i):
            break  # T4
        if _RULE.fullmatch(line) and _list_footer(lines, i):
            break  # T5
        kept.append(line)
    return "\n".join(kept)
