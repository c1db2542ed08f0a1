import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** The repository root: every document and every link target must lie under it. */
export const ROOT = resolve(import.meta.dirname, '../..');

/** README.md and every Markdown file under docs/, as paths relative to the root. */
export function documentFiles(): string[] {
  const walk = (directory: string): string[] =>
    readdirSync(join(ROOT, directory), { withFileTypes: true }).flatMap((entry) => {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) return walk(path);
      return entry.name.endsWith('.md') ? [path] : [];
    });
  return ['README.md', ...walk('docs').sort()];
}

export function readDocument(file: string): string {
  return readFileSync(join(ROOT, file), 'utf8');
}

/** The lines of a Markdown text outside fenced code blocks. */
function linesOutsideFences(text: string): string[] {
  const lines: string[] = [];
  let fence: string | null = null;
  for (const line of text.split('\n')) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker !== undefined && (fence === null || marker.startsWith(fence))) {
      fence = fence === null ? marker : null;
      continue;
    }
    if (fence === null) lines.push(line);
  }
  return lines;
}

/** The lines of a Markdown text outside fenced code blocks, with their inline code spans blanked. */
function proseLines(text: string): string[] {
  return linesOutsideFences(text).map((line) => line.replace(/`[^`]*`/g, (span) => ' '.repeat(span.length)));
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
export function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[^\p{L}\p{M}\p{N}_ -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a Markdown text offers, repeated headings numbered as GitHub does (`-1`, `-2`). */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of linesOutsideFences(text)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = headingAnchor(heading);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** The targets of the inline links, images and link definitions of a Markdown text (not in code). */
export function linkTargets(text: string): string[] {
  const targets: string[] = [];
  for (const line of proseLines(text)) {
    for (const match of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) targets.push(match[1]!);
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(line);
    if (definition) targets.push(definition[1]!);
  }
  return targets;
}

/**
 * What is wrong with one link of `file`, or null when it resolves: a relative target must name
 * a file or directory inside the repository, and a `#fragment` a heading of the Markdown file it
 * points to. Links with a scheme (https:, mailto:) are not followed.
 */
export function brokenLink(file: string, target: string): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null;
  const hash = target.indexOf('#');
  const path = hash === -1 ? target : target.slice(0, hash);
  const fragment = hash === -1 ? null : decodeURIComponent(target.slice(hash + 1));
  const resolved = path === '' ? join(ROOT, file) : resolve(ROOT, dirname(file), decodeURIComponent(path));
  const inRepository = relative(ROOT, resolved);
  if (inRepository.startsWith('..') || resolve(ROOT, inRepository) !== resolved) return `${file}: ${target} points outside the repository`;
  if (!existsSync(resolved)) return `${file}: ${target} names no file`;
  if (fragment === null) return null;
  if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) return `${file}: ${target} has an anchor but is not a Markdown file`;
  if (!anchorsOf(readDocument(inRepository)).has(fragment)) return `${file}: ${target} names no heading of ${inRepository}`;
  return null;
}

/** The body rows of the table in the section under `heading` (the line as written), header and rule left out. */
export function tableUnder(text: string, heading: string): string[] {
  const lines = text.split('\n');
  const start = lines.findIndex((line) => line.trim() === heading);
  if (start === -1) return [];
  const first = lines.findIndex((line, index) => index > start && (line.startsWith('|') || line.startsWith('#')));
  if (first === -1 || !lines[first]!.startsWith('|')) return [];
  const end = lines.findIndex((line, index) => index > first && !line.startsWith('|'));
  return lines.slice(first + 2, end === -1 ? undefined : end);
}

/** The part of a Markdown text under `heading` (a line such as `## Quick start`), up to the next heading of the same or a higher level. */
export function sectionOf(text: string, heading: string): string {
  const level = /^#+/.exec(heading)![0].length;
  const lines = text.split('\n');
  const start = lines.findIndex((line) => line.trim() === heading);
  if (start === -1) throw new Error(`no heading "${heading}"`);
  let fenced = false;
  for (let index = start + 1; index < lines.length; index += 1) {
    if (/^\s*(`{3,}|~{3,})/.test(lines[index]!)) fenced = !fenced;
    else if (!fenced && new RegExp(`^#{1,${level}}\\s`).test(lines[index]!)) return lines.slice(start + 1, index).join('\n');
  }
  return lines.slice(start + 1).join('\n');
}

/** The contents of the fenced code blocks of a Markdown text whose info string is `language`. */
export function codeBlocks(text: string, language: string): string[] {
  return [...text.matchAll(new RegExp(`^\`\`\`${language}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((match) => match[1]!);
}

/** The shell commands of a code block: continuation lines (ending in `\`) joined; blank and comment lines dropped. */
export function shellCommands(block: string): string[] {
  return block
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trim().startsWith('#'));
}
