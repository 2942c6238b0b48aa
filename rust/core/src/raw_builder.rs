//! Test-only: build checkpoint flatbuffers field by field, bypassing the writer's validation, so
//! tests can make exactly the malformed file they need.

use flatbuffers::FlatBufferBuilder;

use crate::schema::fbs;

#[derive(Clone)]
pub(crate) struct RawTensor {
    pub name: Option<String>,
    pub data_type: i32,
    pub dims: Option<Vec<i64>>,
    pub raw: Option<Vec<u8>>,
    pub strings: Option<Vec<String>>,
    pub external_offset: i64,
}

impl RawTensor {
    pub fn floats(name: &str, dims: &[i64]) -> RawTensor {
        let count: i64 = dims.iter().product();
        RawTensor {
            name: Some(name.into()),
            data_type: 1,
            dims: Some(dims.to_vec()),
            raw: Some(vec![0u8; (count * 4) as usize]),
            strings: None,
            external_offset: -1,
        }
    }
}

#[derive(Clone)]
pub(crate) struct RawGroup {
    pub name: Option<String>,
    pub states: Vec<(Option<String>, Vec<RawTensor>)>,
}

#[derive(Clone)]
pub(crate) struct RawCheckpoint {
    pub version: i32,
    pub module: bool,
    pub trainable: Vec<RawTensor>,
    pub frozen: Vec<RawTensor>,
    pub nominal: bool,
    pub has_external_data: bool,
    pub groups: Vec<RawGroup>,
    pub ints: Vec<(Option<String>, i64)>,
    pub strings: Vec<(Option<String>, Option<String>)>,
}

impl Default for RawCheckpoint {
    fn default() -> Self {
        RawCheckpoint {
            version: 2,
            module: true,
            trainable: vec![RawTensor::floats("w", &[2, 3])],
            frozen: vec![RawTensor::floats("b", &[3])],
            nominal: false,
            has_external_data: false,
            groups: Vec::new(),
            ints: Vec::new(),
            strings: Vec::new(),
        }
    }
}

fn tensor<'f>(fbb: &mut FlatBufferBuilder<'f>, t: &RawTensor) -> flatbuffers::WIPOffset<fbs::Tensor<'f>> {
    let raw_data = t.raw.as_ref().map(|r| fbb.create_vector(r));
    let string_data = t.strings.as_ref().map(|s| {
        let offs: Vec<_> = s.iter().map(|x| fbb.create_string(x)).collect();
        fbb.create_vector(&offs)
    });
    let name = t.name.as_ref().map(|n| fbb.create_string(n));
    let dims = t.dims.as_ref().map(|d| fbb.create_vector(d));
    fbs::Tensor::create(
        fbb,
        &fbs::TensorArgs {
            name,
            doc_string: None,
            dims,
            data_type: fbs::TensorDataType(t.data_type),
            raw_data,
            string_data,
            external_data_offset: t.external_offset,
        },
    )
}

fn tensors<'f>(
    fbb: &mut FlatBufferBuilder<'f>,
    ts: &[RawTensor],
) -> flatbuffers::WIPOffset<flatbuffers::Vector<'f, flatbuffers::ForwardsUOffset<fbs::Tensor<'f>>>> {
    let offs: Vec<_> = ts.iter().map(|t| tensor(fbb, t)).collect();
    fbb.create_vector(&offs)
}

impl RawCheckpoint {
    pub fn build(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let module_state = self.module.then(|| {
            let requires_grad_params = Some(tensors(&mut fbb, &self.trainable));
            let frozen_params = Some(tensors(&mut fbb, &self.frozen));
            fbs::ModuleState::create(
                &mut fbb,
                &fbs::ModuleStateArgs {
                    requires_grad_params,
                    frozen_params,
                    is_nominal_state: self.nominal,
                    has_external_data: self.has_external_data,
                },
            )
        });
        let groups: Vec<_> = self
            .groups
            .iter()
            .map(|g| {
                let states: Vec<_> = g
                    .states
                    .iter()
                    .map(|(param, ms)| {
                        let momentums = Some(tensors(&mut fbb, ms));
                        let param_name = param.as_ref().map(|p| fbb.create_string(p));
                        fbs::ParameterOptimizerState::create(
                            &mut fbb,
                            &fbs::ParameterOptimizerStateArgs { param_name, momentums },
                        )
                    })
                    .collect();
                let optimizer_states = Some(fbb.create_vector(&states));
                let group_name = g.name.as_ref().map(|n| fbb.create_string(n));
                fbs::OptimizerGroup::create(
                    &mut fbb,
                    &fbs::OptimizerGroupArgs {
                        group_name,
                        step: 1,
                        initial_learning_rate: 0.5,
                        optimizer_states,
                    },
                )
            })
            .collect();
        let optimizer_groups = Some(fbb.create_vector(&groups));
        let ints: Vec<_> = self
            .ints
            .iter()
            .map(|(n, v)| {
                let name = n.as_ref().map(|n| fbb.create_string(n));
                fbs::IntProperty::create(&mut fbb, &fbs::IntPropertyArgs { name, value: *v })
            })
            .collect();
        let strings: Vec<_> = self
            .strings
            .iter()
            .map(|(n, v)| {
                let name = n.as_ref().map(|n| fbb.create_string(n));
                let value = v.as_ref().map(|v| fbb.create_string(v));
                fbs::StringProperty::create(&mut fbb, &fbs::StringPropertyArgs { name, value })
            })
            .collect();
        let ints = Some(fbb.create_vector(&ints));
        let strings = Some(fbb.create_vector(&strings));
        let property_bag =
            Some(fbs::PropertyBag::create(&mut fbb, &fbs::PropertyBagArgs { ints, floats: None, strings }));
        let root = fbs::Checkpoint::create(
            &mut fbb,
            &fbs::CheckpointArgs { version: self.version, module_state, optimizer_groups, property_bag },
        );
        fbs::finish_checkpoint_buffer(&mut fbb, root);
        fbb.finished_data().to_vec()
    }
}
