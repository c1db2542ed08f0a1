/** Where the admin API lives on the ops listener; the CLI builds its URLs from the same constant. */
export const ADMIN_PREFIX = '/admin';
