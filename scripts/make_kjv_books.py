#!/usr/bin/env python3
"""Writes the text-classification demo data: every verse of the KJV text that
scripts/setup.sh writes (`bible` of Debian's bible-kjv: a line "Book N" opens
chapter N of a book, verse lines are "  V text"), one verse a line as
LABEL<TAB>TEXT (the verse number dropped), labelled by the part of the Bible
its book belongs to:

  law             Genesis - Deuteronomy
  history         Joshua - Esther
  wisdom          Job - Song of Solomon
  major_prophets  Isaiah - Daniel
  minor_prophets  Hosea - Malachi
  gospels_acts    Matthew - Acts
  epistles        Romans - Jude
  revelation      Revelation

Refused (exit status 1, naming the line): a book that is not one of the 66, a
verse before any book, a line of no known form, a tab or carriage return in
a verse, and a text in which some book never appears (cut short). The output
is written to a temporary file and renamed, so it appears whole or not at
all. Prints the verses per class. Standard library only.

usage: make_kjv_books.py KJV_TXT OUT_TSV
"""
import os
import re
import sys

GROUPS = [
    ("law", ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy"]),
    ("history", ["Joshua", "Judges", "Ruth", "1 Samuel", "2 Samuel", "1 Kings", "2 Kings",
                 "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther"]),
    ("wisdom", ["Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon"]),
    ("major_prophets", ["Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel"]),
    ("minor_prophets", ["Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum",
                        "Habakkuk", "Zephaniah", "Haggai", "Zechariah", "Malachi"]),
    ("gospels_acts", ["Matthew", "Mark", "Luke", "John", "Acts"]),
    ("epistles", ["Romans", "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians",
                  "Philippians", "Colossians", "1 Thessalonians", "2 Thessalonians", "1 Timothy",
                  "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
                  "1 John", "2 John", "3 John", "Jude"]),
    ("revelation", ["Revelation"]),
]
GROUP_OF = {book: label for label, books in GROUPS for book in books}
assert len(GROUP_OF) == 66

CHAPTER = re.compile(r"^(\S.*) ([0-9]+)$")  # "Song of Solomon 2"
VERSE = re.compile(r"^ +[0-9]+ (.*)$")      # "  12 And God said ..."


def fail(path, line, what):
    sys.exit("make_kjv_books: %s:%d: %s" % (path, line, what))


def convert(src):
    """[(label, verse text)] of the KJV text at src, in file order."""
    rows, book, seen = [], None, set()
    with open(src, encoding="utf-8", newline="\n") as f:
        for n, line in enumerate(f, 1):
            line = line[:-1] if line.endswith("\n") else line
            if not line.strip():
                continue
            m = VERSE.match(line)
            if m:
                text = m.group(1).strip()
                if book is None:
                    fail(src, n, "a verse before any book")
                if "\t" in text or "\r" in text:
                    fail(src, n, "a tab or carriage return in the verse")
                if not text:
                    fail(src, n, "an empty verse")
                rows.append((GROUP_OF[book], text))
                continue
            m = CHAPTER.match(line)
            if not m:
                fail(src, n, "neither a verse ('  N text') nor a chapter ('Book N'): %r"
                     % line[:80])
            if m.group(1) not in GROUP_OF:
                fail(src, n, "unknown book %r" % m.group(1))
            book = m.group(1)
            seen.add(book)
    missing = [b for b in GROUP_OF if b not in seen]
    if missing:
        sys.exit("make_kjv_books: %s: no verses of %d book(s), first %s: the text is cut short"
                 % (src, len(missing), missing[0]))
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_kjv_books.py KJV_TXT OUT_TSV")
    src, out = sys.argv[1], sys.argv[2]
    rows = convert(src)
    tmp = "%s.tmp.%d" % (out, os.getpid())
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for label, text in rows:
                f.write("%s\t%s\n" % (label, text))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    counts = {label: 0 for label, _ in GROUPS}
    for label, _ in rows:
        counts[label] += 1
    print("make_kjv_books: %d verses in %s" % (len(rows), out))
    for label, _ in GROUPS:
        print("  %-15s %6d  (%.1f%%)" % (label, counts[label], 100.0 * counts[label] / len(rows)))


if __name__ == "__main__":
    main()
