#!/usr/bin/env python3
"""Checks on the dashboard's DOM as dumped by headless Chromium (--dump-dom), for browser_test.sh.

    dom_check.py page PAGE_HTML                       the page as served is self-contained
    dom_check.py admin DOM JOBS_JSON... [--summary SUMMARY_JSON...] [--nodes NODES_JSON]
        every running job of the API answers (any of them: they bracket the browser's load) has
        a row whose data-value's match one of the answers, sits on its GPU, and the page is ready
    dom_check.py team DOM OWN_JOB_ID OTHER_JOB_ID OTHER_JOB_NAME
        a team token's view shows its own job and nothing of another team's
    dom_check.py badtoken DOM                         a refused token is shown as an error
    dom_check.py chart DOM JOB_ID                     the selected job's usage chart is drawn
    dom_check.py absent DOM STRING                    STRING is nowhere in the DOM

Prints one line per check ("ok: ..." or "FAIL: ...") and exits 1 if any failed.
"""
import html.parser
import json
import re
import sys

VOID = {'area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'source',
        'track', 'wbr'}

failures = 0


def ok(msg):
    print('ok: ' + msg)


def fail(msg):
    global failures
    failures += 1
    print('FAIL: ' + msg)


def check(cond, msg):
    (ok if cond else fail)(msg)
    return cond


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []
        self.text = []

    def get(self, k, default=None):
        v = self.attrs.get(k, default)
        return default if v is None and default is not None else v

    def all_text(self):
        out = list(self.text)
        for c in self.children:
            out.append(c.all_text())
        return ''.join(out)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def ancestors(self):
        p = self.parent
        while p is not None:
            yield p
            p = p.parent


class Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element('#root', [], None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.cur)
        self.cur.children.append(e)
        if tag not in VOID:
            self.cur = e

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Element(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        e = self.cur
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None and e.parent is not None:
            self.cur = e.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    p = Parser()
    p.feed(text)
    p.close()
    return p.root, text


def find_all(root, pred):
    return [e for e in root.iter() if pred(e)]


def body_of(root):
    bodies = find_all(root, lambda e: e.tag == 'body')
    return bodies[0] if bodies else None


def load_json(path):
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def as_attr(v):
    """The page's data-value for an API value: '' for null, JSON-ish numbers, strings as is."""
    if v is None:
        return ''
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def check_ready(root, what):
    body = body_of(root)
    if not check(body is not None, what + ': the DOM has a body'):
        return False
    ready = body.get('data-ready') == '1'
    check(ready, what + ': body[data-ready="1"] (the first full render happened)')
    err = body.get('data-error')
    check(err is None, what + ': no body[data-error]' + ('' if err is None else ' (it says: %s)' % err))
    return ready


def cmd_page(args):
    with open(args[0], encoding='utf-8', errors='replace') as f:
        text = f.read()
    check('<html' in text.lower() and '</html>' in text.lower(), 'GET / serves an HTML page')
    # Air-gapped: nothing loaded from elsewhere (the SVG namespace URI is a name, not a load).
    external = re.findall(r'''(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//''', text, re.I)
    external += re.findall(r'''url\(\s*["']?\s*(?:https?:)?//''', text, re.I)
    external += re.findall(r'@import', text, re.I)
    check(not external, 'the page loads nothing from other hosts ' + (str(external[:3]) if external else ''))
    check(')PALADIN_EMBED"' not in text, 'the page does not hold the embed delimiter')
    check('innerHTML' not in text and 'outerHTML' not in text and 'insertAdjacentHTML' not in text
          and 'document.write' not in text, 'the page never parses text as HTML')


def cmd_admin(args):
    jobs_files, summary_files, nodes_file = [], [], None
    dom = args[0]
    mode = 'jobs'
    for a in args[1:]:
        if a == '--summary':
            mode = 'summary'
        elif a == '--nodes':
            mode = 'nodes'
        elif mode == 'jobs':
            jobs_files.append(a)
        elif mode == 'summary':
            summary_files.append(a)
        else:
            nodes_file = a
    root, _ = parse(dom)
    check_ready(root, 'admin view')
    answers = [load_json(p)['jobs'] for p in jobs_files]
    running = {}
    for ans in answers:
        for j in ans:
            if j.get('state') == 'running':
                running.setdefault(j['id'], []).append(j)
    if not check(running, 'the API says some jobs run (%d)' % len(running)):
        return
    rows = {e.get('data-job'): e for e in find_all(root, lambda e: e.tag == 'tr' and e.get('data-job'))}
    check(len(rows) >= len(running), 'the jobs table has %d rows (>= %d running)' % (len(rows), len(running)))
    gpus = {e.get('data-gpu'): e for e in find_all(root, lambda e: e.get('data-gpu') is not None)}
    for jid, versions in sorted(running.items()):
        row = rows.get(jid)
        if not check(row is not None, '%s has a row tr[data-job]' % jid):
            continue
        cells = {c.get('data-field'): c for c in row.iter() if c.get('data-field')}
        for field in ('name', 'team', 'state', 'node', 'quota_bytes', 'used_bytes', 'predicted_bytes'):
            cell = cells.get(field)
            if not check(cell is not None, '%s: a [data-field=%s] cell' % (jid, field)):
                continue
            got = cell.get('data-value')
            want = sorted({as_attr(v.get(field)) for v in versions})
            check(got in want, '%s.%s: page %r, API %s' % (jid, field, got, ' or '.join(repr(w) for w in want)))
        name_cell = cells.get('name')
        if name_cell is not None:
            check(name_cell.all_text().strip() == versions[-1].get('name'),
                  '%s: the name is shown as text (%r)' % (jid, name_cell.all_text().strip()))
        gpu_key = '%s/%s' % (versions[-1].get('node'), versions[-1].get('gpu'))
        g = gpus.get(gpu_key)
        if check(g is not None, '%s: its GPU [data-gpu="%s"] is shown' % (jid, gpu_key)):
            seg = [e for e in g.iter() if e.get('data-gpu-job') == jid]
            if check(seg, '%s is listed on GPU %s' % (jid, gpu_key)):
                want_q = {as_attr(v.get('quota_bytes')) for v in versions}
                check(seg[0].get('data-quota-bytes') in want_q,
                      '%s on %s: quota %r' % (jid, gpu_key, seg[0].get('data-quota-bytes')))
    if nodes_file:
        for n in load_json(nodes_file).get('nodes', []):
            nodes_el = [e for e in root.iter() if e.get('data-node') == n['name']]
            if check(nodes_el, 'node %s is shown' % n['name']):
                check(nodes_el[0].get('data-state') == n.get('state'),
                      'node %s state %r (API %r)' % (n['name'], nodes_el[0].get('data-state'), n.get('state')))
            for gpu in n.get('gpus', []):
                key = '%s/%s' % (n['name'], gpu['index'])
                g = gpus.get(key)
                if check(g is not None, 'GPU %s is shown' % key):
                    check(g.get('data-emulated') == as_attr(bool(gpu.get('emulated'))),
                          'GPU %s emulated=%s' % (key, g.get('data-emulated')))
                    check(g.get('data-healthy') == as_attr(gpu.get('healthy') is not False),
                          'GPU %s healthy=%s' % (key, g.get('data-healthy')))
                    check(g.get('data-memory-bytes') == as_attr(gpu.get('memory_bytes')),
                          'GPU %s memory %s' % (key, g.get('data-memory-bytes')))
                    if gpu.get('emulated'):
                        check('emulated' in g.all_text(), 'GPU %s is labelled emulated' % key)
    if summary_files:
        sums = [load_json(p) for p in summary_files]
        cards = {e.get('data-summary'): e for e in root.iter() if e.get('data-summary')}
        for key in ('jobs_running', 'jobs_pending', 'nodes_alive', 'gpus'):
            if not any(key in s for s in sums):
                continue
            want = sorted({as_attr(s.get(key)) for s in sums})
            got = cards[key].get('data-value') if key in cards else None
            check(got in want, 'summary %s: page %r, API %s' % (key, got, ' or '.join(want)))
        # The forecast check panel: the target, and the fleet's windows once there are some.
        checks = [s['prediction_check'] for s in sums if isinstance(s.get('prediction_check'), dict)]
        if checks:
            panel = [e for e in root.iter() if e.get('id') == 'check-panel']
            check(len(panel) == 1, 'the forecast check panel is shown')
            if panel:
                want = sorted({as_attr(c.get('target_under_rate')) for c in checks})
                got = panel[0].get('data-target')
                check(got in want, 'check target: page %r, API %s' % (got, ' or '.join(want)))
            rows = {e.get('data-check'): e for e in root.iter() if e.tag == 'tr' and e.get('data-check')}
            if 'fleet' in rows:
                cells = {c.get('data-field'): c for c in rows['fleet'].iter() if c.get('data-field')}
                want = sorted({as_attr(c.get('windows')) for c in checks})
                got = cells['windows'].get('data-value') if 'windows' in cells else None
                check(got in want, 'check fleet windows: page %r, API %s' % (got, ' or '.join(want)))


def cmd_team(args):
    dom, own, other, other_name = args
    root, text = parse(dom)
    check_ready(root, 'team view')
    rows = {e.get('data-job') for e in root.iter() if e.tag == 'tr' and e.get('data-job')}
    check(own in rows, 'the team sees its own job %s' % own)
    check(other not in text, "the team's page holds nothing of %s" % other)
    check(other_name not in text, "the team's page holds no %r" % other_name)


def cmd_badtoken(args):
    root, _ = parse(args[0])
    body = body_of(root)
    check(body is not None and body.get('data-error'), 'a refused token sets body[data-error] (%r)'
          % (body.get('data-error') if body is not None else None))
    check(body is not None and body.get('data-ready') is None, 'a refused token never sets data-ready')
    err = [e for e in root.iter() if e.get('id') == 'error']
    check(err and err[0].get('hidden') is None and err[0].all_text().strip(),
          'the error is shown on the page')


def cmd_chart(args):
    dom, job = args
    root, _ = parse(dom)
    check_ready(root, 'job view')
    charts = [e for e in root.iter() if e.get('id') == 'usage-chart']
    if check(charts, 'the usage chart is drawn'):
        c = charts[0]
        check(c.tag == 'svg', 'the chart is an inline SVG')
        check(c.get('data-chart-job') == job, 'the chart is of %s (%r)' % (job, c.get('data-chart-job')))
        n = int(c.get('data-samples') or 0)
        ok('the chart has %d usage samples' % n)
        if n >= 2:
            series = {e.get('data-series') for e in c.iter() if e.get('data-series')}
            check({'used', 'quota'} <= series, 'the chart draws used and quota (%s)' % sorted(series))


def cmd_absent(args):
    dom, s = args
    with open(dom, encoding='utf-8', errors='replace') as f:
        check(s not in f.read(), 'the DOM does not hold %s' % (s[:8] + '...'))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cmd = {'page': cmd_page, 'admin': cmd_admin, 'team': cmd_team, 'badtoken': cmd_badtoken,
           'chart': cmd_chart, 'absent': cmd_absent}.get(sys.argv[1])
    if cmd is None:
        print(__doc__)
        return 2
    cmd(sys.argv[2:])
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
