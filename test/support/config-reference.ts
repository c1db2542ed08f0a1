import type { TSchema } from '@sinclair/typebox';
import { ConfigSchema } from '../../src/config/schema.js';

export interface ReferenceRow {
  key: string;
  markdown: string;
}

/** The reference table of docs/configuration.md, derived from the schema (descriptions and defaults live there). */
export function configReferenceRows(): ReferenceRow[] {
  const rows: ReferenceRow[] = [];
  const walk = (schema: TSchema, path: string): void => {
    if (schema.type === 'object' && schema.properties) {
      for (const [key, child] of Object.entries<TSchema>(schema.properties)) walk(child, path === '' ? key : `${path}.${key}`);
      return;
    }
    // A record of objects (rateLimits): its entries' keys, under the placeholder <name>.
    const entry = schema.type === 'object' && schema.patternProperties ? Object.values<TSchema>(schema.patternProperties)[0] : undefined;
    if (entry?.type === 'object') {
      rows.push({
        key: path,
        markdown: `| \`${path}\` | object | \`${JSON.stringify(schema.default)}\` | ${String(schema.description ?? '').replace(/\|/g, '\\|')} |`,
      });
      walk(entry, `${path}.<name>`);
      return;
    }
    if (schema.type === 'array' && schema.items?.type === 'object') {
      walk(schema.items as TSchema, `${path}[]`);
      return;
    }
    const type = schema.anyOf
      ? schema.anyOf.map((member: TSchema) => member.const ?? member.type).join(' \\| ')
      : schema.type === 'array'
        ? `list of ${schema.items.anyOf ? schema.items.anyOf.map((member: TSchema) => member.const ?? member.type).join(' \\| ') : schema.items.type}`
        : String(schema.type);
    const defaultValue = schema.default === undefined ? '—' : `\`${JSON.stringify(schema.default)}\``;
    const meaning = String(schema.description ?? '').replace(/\|/g, '\\|');
    rows.push({ key: path, markdown: `| \`${path}\` | ${type} | ${defaultValue} | ${meaning} |` });
  };
  walk(ConfigSchema, '');
  return rows;
}
