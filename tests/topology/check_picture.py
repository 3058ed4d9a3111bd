#!/usr/bin/env python3
"""Checks the pictures of `courier-info --topology` on a recorded machine:
--dot FILE (a Graphviz graph) and --svg FILE (that graph drawn by Graphviz's
dot program), and the errors when Graphviz is missing or fails.

    check_picture.py CHECK COURIER_INFO MACHINE_XML WORK_DIR

CHECK is one of:
  dot          the graph, read back by `dot -Tjson0`, shows every GPU and NIC
               with its name and PCI address inside its package (with its
               NUMA node), a GPU and a NIC on one switch port in one box, and
               exactly the pairs of --json as edges in the GPU's colour,
               labelled with their PCIe distance; the legend lists each GPU
  svg          the SVG is well-formed, names every GPU and NIC, and draws one
               edge per pair
  names        names with DOT and HTML markup (quotes, backslashes, <, &) and
               non-ASCII come out unchanged in the drawing
  no-graphviz  with no dot on PATH, --svg fails with a message saying what to
               install and writes nothing; --dot still works
  dot-fails    a dot that fails or dies: --svg fails with what dot said and
               writes nothing

Exit 0 when everything holds, 77 (skipped) when a check needs Graphviz's dot
and it is not installed, 1 with every difference printed otherwise.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import xml.dom.minidom

SKIP = 77


def run(courier_info, xml_path, args, path=None):
    env = dict(os.environ, COURIER_TOPOLOGY_XML=xml_path)
    env.pop("HWLOC_THISSYSTEM", None)  # the file's allowed cpuset, not this process's
    if path is not None:
        env["PATH"] = path
    return subprocess.run([courier_info, "--topology"] + args, env=env, capture_output=True,
                          text=True)


def run_ok(courier_info, xml_path, args):
    out = run(courier_info, xml_path, args)
    if out.returncode != 0:
        sys.exit(f"courier-info --topology {' '.join(args)} failed ({out.returncode}): "
                 f"{out.stderr.strip()}")
    return out


def need_dot():
    if shutil.which("dot") is None:
        print("Graphviz's dot is not installed (apt-get install graphviz): skipped")
        sys.exit(SKIP)


def plain(label):
    """The text of a label: an HTML-like one without its markup, one line per <BR/>."""
    text = re.sub(r"<BR[^>]*>", "\n", label)
    return html.unescape(re.sub(r"<[^>]*>", "", text))


def read_graph(path):
    """The graph in `path` as Graphviz reads it: nodes, clusters (name -> the
    names of its nodes, every level below included), edges."""
    out = subprocess.run(["dot", "-Tjson0", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{path}: Graphviz cannot read it: {out.stderr.strip()}")
    graph = json.loads(out.stdout)
    objects = graph.get("objects", [])
    count = graph.get("_subgraph_cnt", 0)  # the subgraphs come first
    names = {o["_gvid"]: o["name"] for o in objects[count:]}
    nodes = {o["name"]: o for o in objects[count:]}
    clusters = {o["name"]: (o, {names[i] for i in o.get("nodes", [])}) for o in objects[:count]
                if o["name"].startswith("cluster")}
    edges = [(names[e["tail"]], names[e["head"]], e) for e in graph.get("edges", [])
             if "invis" not in e.get("style", "")]  # those only place the nodes
    return graph, nodes, clusters, edges


def innermost(clusters, node):
    holding = [(len(members), name) for name, (_, members) in clusters.items() if node in members]
    return min(holding)[1] if holding else None


def check_dot(courier_info, xml_path, work):
    need_dot()
    path = os.path.join(work, "machine.gv")
    report = json.loads(run_ok(courier_info, xml_path, ["--json", "--dot", path]).stdout)
    graph, nodes, clusters, edges = read_graph(path)
    errors = []
    if graph.get("directed"):
        errors.append("the graph is directed; pairs have no direction")

    def text(node):
        return plain(nodes[node].get("label", "")) if node in nodes else ""

    for i, gpu in enumerate(report["gpus"]):
        node = f"gpu{i}"
        if node not in nodes:
            errors.append(f"no node {node} for GPU {i}")
            continue
        for word in (f"GPU {i}", gpu["name"], gpu["pci"]):
            if word not in text(node):
                errors.append(f"{node}: the label {text(node)!r} lacks {word!r}")
    for k, nic in enumerate(report["rdma_nics"]):
        node = f"nic{k}"
        for word in (nic["name"], nic["pci"]):
            if word not in text(node):
                errors.append(f"{node}: the label {text(node)!r} lacks {word!r}")

    # Each device inside a package box, which shows the device's NUMA node.
    packages = {name: plain(c.get("label", "")) for name, (c, _) in clusters.items()
                if plain(c.get("label", "")).startswith("Package ")}
    devices = [(f"gpu{i}", g["numa"]) for i, g in enumerate(report["gpus"])]
    devices += [(f"nic{k}", n["numa"]) for k, n in enumerate(report["rdma_nics"])]
    for node, numa in devices:
        mine = [label for name, label in packages.items() if node in clusters[name][1]]
        if packages and len(mine) != 1:
            errors.append(f"{node} is in {len(mine)} package boxes, expected 1")
        elif mine and numa is not None and f"NUMA {numa}: CPUs" not in mine[0]:
            errors.append(f"{node} (NUMA {numa}) is in {mine[0].splitlines()[0]}, which shows "
                          f"{mine[0].splitlines()[1:]}")

    # The pairs: exactly those of --json, each in its GPU's colour with its distance.
    want = {}
    for i, gpu in enumerate(report["gpus"]):
        for name, hops in zip(gpu["nics"], gpu["distances"]):
            want[(f"gpu{i}", name)] = hops
    nic_node = {f"nic{k}": n["name"] for k, n in enumerate(report["rdma_nics"])}
    got = {}
    for tail, head, edge in edges:
        gpu, nic = (tail, head) if tail.startswith("gpu") else (head, tail)
        got[(gpu, nic_node.get(nic, nic))] = edge
    if set(got) != set(want):
        errors.append(f"edges {sorted(got)}, expected the pairs {sorted(want)}")
    colours = {}
    for (gpu, nic), edge in got.items():
        if (gpu, nic) not in want:
            continue
        colour = nodes[gpu].get("color")
        colours[gpu] = colour
        if edge.get("color") != colour:
            errors.append(f"{gpu} -- {nic}: colour {edge.get('color')}, the GPU's is {colour}")
        label = f"{want[(gpu, nic)]} hops"
        if edge.get("label") != label:
            errors.append(f"{gpu} -- {nic}: label {edge.get('label')!r}, expected {label!r}")
        # One switch port: one box; farther apart: different boxes.
        nic_name = next(n for n, name in nic_node.items() if name == nic)
        same = innermost(clusters, gpu) == innermost(clusters, nic_name)
        if same != (want[(gpu, nic)] == 2):
            errors.append(f"{gpu} and {nic} ({want[(gpu, nic)]} hops) are "
                          f"{'in one box' if same else 'in different boxes'}")
    if len(set(colours.values())) != min(len(colours), 12):
        errors.append(f"GPUs share colours: {colours}")

    legend = plain(graph.get("label", ""))
    for i, gpu in enumerate(report["gpus"]):
        if f"GPU {i} ({gpu['pci']}, NUMA" not in legend:
            errors.append(f"the legend lacks GPU {i}: {legend!r}")
    title = plain(clusters.get("cluster_machine", ({}, set()))[0].get("label", ""))
    if f"NIC selection: {report['selection']}" not in title:
        errors.append(f"the title {title!r} lacks the NIC selection")
    return errors, (f"{path}: {len(report['gpus'])} GPUs, {len(report['rdma_nics'])} NICs, "
                    f"{len(want)} pairs")


def svg_texts(path):
    doc = xml.dom.minidom.parse(path)  # raises on malformed XML
    if doc.documentElement.tagName != "svg":
        sys.exit(f"{path}: the root element is {doc.documentElement.tagName}, not svg")
    texts = ["".join(c.data for c in t.childNodes if c.nodeType == c.TEXT_NODE)
             for t in doc.getElementsByTagName("text")]
    return doc, texts


def check_svg(courier_info, xml_path, work):
    need_dot()
    path = os.path.join(work, "machine.svg")
    report = json.loads(run_ok(courier_info, xml_path, ["--json", "--svg", path]).stdout)
    doc, texts = svg_texts(path)
    errors = []
    words = [f"GPU {i}" for i in range(len(report["gpus"]))]
    words += [nic["name"] for nic in report["rdma_nics"]]
    missing = [w for w in words if w not in texts]
    if missing:
        errors.append(f"{path}: the drawing does not name {missing}")
    pairs = sum(len(g["nics"]) for g in report["gpus"])
    drawn = [g for g in doc.getElementsByTagName("g") if g.getAttribute("class") == "edge"]
    if len(drawn) != pairs:
        errors.append(f"{path}: {len(drawn)} edges drawn, expected {pairs} pairs")
    return errors, f"{path}: well-formed SVG naming {len(words)} devices, {pairs} pairs"


def check_names(courier_info, xml_path, work):
    """GPU 0's OS device (in its box) and model (in its tooltip) renamed in a
    copy of the machine. The model has no backslash: Graphviz 2.43 (Debian
    12) reads the escapes of an SVG tooltip twice, newer ones once."""
    need_dot()
    name = 'cu"da\\N\\ <0> & \u00fc'
    model = 'GH100 "SXM" <b>&amp;</b> \u2014 \u00e9'
    with open(xml_path, encoding="utf-8") as f:
        machine = f.read()
    first_gpu = re.search(r'name="(cuda0|rsmi0)"', machine)
    if first_gpu is None:
        sys.exit(f"{xml_path}: no cuda0 or rsmi0 to rename")
    osdev = first_gpu.group(1)
    model_at = machine.rfind('<info name="PCIDevice" value="', 0, first_gpu.start())
    end = machine.index('"/>', model_at)
    machine = (machine[:model_at] + '<info name="PCIDevice" value="' + html.escape(model) +
               machine[end:].replace(f'name="{osdev}"', f'name="{html.escape(name)}"', 1))
    renamed = os.path.join(work, "renamed.xml")
    with open(renamed, "w", encoding="utf-8") as f:
        f.write(machine)
    path = os.path.join(work, "renamed.svg")
    run_ok(courier_info, renamed, ["--svg", path])
    doc, texts = svg_texts(path)
    errors = []
    if name not in texts:
        errors.append(f"{path}: no text {name!r} among {texts}")
    titles = [a.getAttribute("xlink:title") for a in doc.getElementsByTagName("a")]
    if not any(t.startswith("GPU 0: ") and model in t for t in titles):
        errors.append(f"{path}: no tooltip of GPU 0 with {model!r} among {titles}")
    return errors, f"{path}: {name!r} and {model!r} drawn as they are"


def check_no_graphviz(courier_info, xml_path, work):
    empty = os.path.join(work, "no-dot-here")
    os.makedirs(empty, exist_ok=True)
    svg = os.path.join(work, "never.svg")
    if os.path.exists(svg):
        os.remove(svg)
    out = run(courier_info, xml_path, ["--svg", svg], path=empty)
    errors = []
    if out.returncode != 1:
        errors.append(f"--svg without Graphviz: exit status {out.returncode}, expected 1")
    for word in ("--svg " + svg, "'dot'", "Graphviz", "apt-get install graphviz", "--dot FILE"):
        if word not in out.stderr:
            errors.append(f"--svg without Graphviz: {out.stderr.strip()!r} lacks {word!r}")
    if out.stdout:
        errors.append(f"--svg without Graphviz printed the report anyway: {out.stdout[:80]!r}")
    if os.path.exists(svg):
        errors.append(f"--svg without Graphviz wrote {svg}")
    dot = os.path.join(work, "without-graphviz.gv")
    out = run(courier_info, xml_path, ["--dot", dot], path=empty)
    if out.returncode != 0 or not os.path.exists(dot) or "graph courier_topology" not in open(
            dot, encoding="utf-8").read():
        errors.append(f"--dot without Graphviz: exit status {out.returncode}, "
                      f"{out.stderr.strip()!r}; it needs no Graphviz")
    return errors, f"without Graphviz: {svg} not written, and said so"


def check_dot_fails(courier_info, xml_path, work):
    errors = []
    for name, script, expect in [
            ("exits", 'cat >/dev/null; echo "Error: <stdin>: syntax error in line 7" >&2; exit 3',
             "Graphviz's dot failed (exit status 3): Error: <stdin>: syntax error in line 7"),
            ("quits", "exit 4", "Graphviz's dot failed (exit status 4)"),
            ("dies", 'echo "out of memory" >&2; kill -9 $$',
             "Graphviz's dot was killed by signal 9"),
    ]:
        fake = os.path.join(work, f"dot-{name}")
        os.makedirs(fake, exist_ok=True)
        program = os.path.join(fake, "dot")
        with open(program, "w") as f:
            f.write(f"#!/bin/sh\n{script}\n")
        os.chmod(program, 0o755)
        svg = os.path.join(work, f"{name}.svg")
        if os.path.exists(svg):
            os.remove(svg)
        out = run(courier_info, xml_path, ["--svg", svg], path=fake + os.pathsep + "/usr/bin:/bin")
        if out.returncode != 1 or expect not in out.stderr:
            errors.append(f"a dot that {name}: exit status {out.returncode}, "
                          f"{out.stderr.strip()!r}; expected 1 and {expect!r}")
        if os.path.exists(svg):
            errors.append(f"a dot that {name}: {svg} written")
    return errors, "a failing dot: reported, nothing written"


CHECKS = {"dot": check_dot, "svg": check_svg, "names": check_names,
          "no-graphviz": check_no_graphviz, "dot-fails": check_dot_fails}


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in CHECKS:
        sys.exit(__doc__)
    check, courier_info, xml_path, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    errors, summary = CHECKS[check](courier_info, xml_path, work)
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(summary)


if __name__ == "__main__":
    main()
