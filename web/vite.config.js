import { defineConfig } from 'vite';

// Relative asset paths: the coordinator serves dist/ under "/".
export default defineConfig({
  base: './',
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false },
});
