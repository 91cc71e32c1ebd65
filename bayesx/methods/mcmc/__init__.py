"""The sampler family: MCMC methods (HMC, NUTS, RWM, pCN, AE-HMC, AE-pCN)."""
