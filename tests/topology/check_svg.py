#!/usr/bin/env python3
"""Runs `courier-info --topology --svg FILE` (COURIER_TOPOLOGY_XML from the
environment) and checks that FILE is well-formed SVG naming every given word.

    check_svg.py COURIER_INFO FILE WORD...
"""
import subprocess
import sys
import xml.dom.minidom


def main():
    courier_info, path, words = sys.argv[1], sys.argv[2], sys.argv[3:]
    run = subprocess.run([courier_info, "--topology", "--svg", path], capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit(f"courier-info failed ({run.returncode}): {run.stderr.strip()}")
    doc = xml.dom.minidom.parse(path)  # raises on malformed XML
    if doc.documentElement.tagName != "svg":
        sys.exit(f"{path}: the root element is {doc.documentElement.tagName}, not svg")
    text = " ".join(child.data for node in doc.getElementsByTagName("text")
                    for child in node.childNodes if child.nodeType == child.TEXT_NODE)
    missing = [w for w in words if w not in text]
    if missing:
        sys.exit(f"{path}: the drawing does not name {missing}")
    print(f"{path}: well-formed SVG naming {len(words)} devices")


if __name__ == "__main__":
    main()
