"""The trainer family and all VAE code: training methods (vae, hvi, rmhvi, dppvae), the models and nets, their
bounds, the k-DPP prior, the Riemannian leapfrog, evaluation and plots."""
